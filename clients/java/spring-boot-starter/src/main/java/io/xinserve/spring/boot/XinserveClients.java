package io.xinserve.spring.boot;

import io.xinserve.client.XinserveClient;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Optional;
import org.springframework.beans.factory.DisposableBean;

/**
 * All auto-configured clients by name: {@code "default"} for {@code xinserve.client.*} (when its
 * address is set) and each entry of {@code xinserve.client.clients}. Closes them on shutdown.
 */
public class XinserveClients implements DisposableBean {
  /** The name of the client configured directly under {@code xinserve.client}. */
  public static final String DEFAULT = "default";

  private final Map<String, XinserveClient> clients;
  private final java.util.Set<String> notOwned;

  /**
   * @param clients the clients by name; the map is copied; all are closed by {@link #destroy()}
   */
  public XinserveClients(Map<String, XinserveClient> clients) {
    this(clients, java.util.Set.of());
  }

  /**
   * @param clients the clients by name; the map is copied
   * @param notOwned names of clients owned elsewhere (e.g. the application's own bean), which
   *     {@link #destroy()} leaves open
   */
  public XinserveClients(Map<String, XinserveClient> clients, java.util.Set<String> notOwned) {
    this.clients = Collections.unmodifiableMap(new LinkedHashMap<>(clients));
    this.notOwned = java.util.Set.copyOf(notOwned);
  }

  /**
   * @param name the client's name
   * @return the client
   * @throws UnknownXinserveClientException (a {@link NoSuchElementException}) if no client has
   *     that name
   */
  public XinserveClient get(String name) {
    XinserveClient c = clients.get(name);
    if (c == null) {
      throw new UnknownXinserveClientException(name, clients.keySet());
    }
    return c;
  }

  /** @return the default client, if {@code xinserve.client.address} is set */
  public Optional<XinserveClient> getDefault() {
    return Optional.ofNullable(clients.get(DEFAULT));
  }

  /** @return all clients by name, read-only */
  public Map<String, XinserveClient> asMap() {
    return clients;
  }

  /** Closes every client. */
  @Override
  public void destroy() {
    clients.forEach(
        (name, client) -> {
          if (!notOwned.contains(name)) {
            client.close();
          }
        });
  }
}
