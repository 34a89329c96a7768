package io.xinserve.spring.boot;

import java.util.Collection;
import java.util.List;
import java.util.NoSuchElementException;

/**
 * {@link XinserveClients#get(String)} was asked for a client name that is not configured (e.g.
 * {@code xinserve.ai.client=nope}). Reported at start-up by {@link XinserveFailureAnalyzer.UnknownClient}
 * with the configured names.
 */
public class UnknownXinserveClientException extends NoSuchElementException {
  private static final long serialVersionUID = 1L;

  private final String name;
  private final transient List<String> configured;

  /**
   * @param name the name asked for
   * @param configured the names of the configured clients, in order
   */
  public UnknownXinserveClientException(String name, Collection<String> configured) {
    super("no xinserve client named '" + name + "'; configured: " + configured);
    this.name = name;
    this.configured = List.copyOf(configured);
  }

  /** @return the name asked for */
  public String name() {
    return name;
  }

  /** @return the names of the configured clients, in order */
  public List<String> configured() {
    return configured;
  }
}
