package io.xinserve.spring.boot;

import io.grpc.ClientInterceptor;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.binder.grpc.ObservationGrpcClientInterceptor;
import io.micrometer.observation.ObservationRegistry;
import io.xinserve.client.XinserveClient;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.ssl.SslBundles;
import org.springframework.util.StringUtils;

/**
 * What the auto-configurations of every Spring Boot generation build, independent of Boot's
 * packages (which moved between Boot 3 and 4): the client factory, the client registry and the
 * interceptor providers. Each generation's auto-configuration only adds the annotations and the
 * generation's own types (health).
 */
public final class XinserveClientBeans {
  private XinserveClientBeans() {}

  /**
   * @param sslBundles SSL bundles, if any
   * @param headers header contributors
   * @param customizers builder customizers
   * @param interceptors interceptor providers
   * @return the factory that builds every client
   */
  public static XinserveClientFactory factory(
      ObjectProvider<SslBundles> sslBundles,
      ObjectProvider<XinserveCallHeaders> headers,
      ObjectProvider<XinserveClientCustomizer> customizers,
      ObjectProvider<XinserveInterceptorProvider> interceptors) {
    List<XinserveInterceptorProvider> providers = interceptors.orderedStream().toList();
    return new XinserveClientFactory(
        sslBundles.getIfAvailable(),
        headers.orderedStream().toList(),
        customizers.orderedStream().toList(),
        name -> {
          List<ClientInterceptor> all = new ArrayList<>();
          providers.forEach(p -> all.addAll(p.interceptors(name)));
          return all;
        });
  }

  /**
   * @param factory the client factory
   * @param properties the properties
   * @param own the application's own client, which becomes the default client (and is not closed
   *     by the registry), or {@code null} to build the default client from properties
   * @return all configured clients by name
   */
  public static XinserveClients clients(
      XinserveClientFactory factory, XinserveClientProperties properties, XinserveClient own) {
    Map<String, XinserveClient> clients = new LinkedHashMap<>();
    if (own != null) {
      clients.put(XinserveClients.DEFAULT, own);
    } else if (StringUtils.hasText(properties.getAddress())) {
      clients.put(XinserveClients.DEFAULT, factory.create(XinserveClients.DEFAULT, properties, null));
    }
    properties.getClients().forEach((name, s) -> clients.put(name, factory.create(name, s, properties)));
    return new XinserveClients(clients, own != null ? Set.of(XinserveClients.DEFAULT) : Set.of());
  }

  /**
   * @param registry the meter registry, if any
   * @return Micrometer meters for each client
   */
  public static XinserveInterceptorProvider metrics(ObjectProvider<MeterRegistry> registry) {
    return name -> {
      MeterRegistry r = registry.getIfAvailable();
      return r == null ? List.of() : List.of(new XinserveMetricsInterceptor(r, name));
    };
  }

  /**
   * @param registry the observation registry, if any
   * @return one Micrometer Observation ({@code grpc.client}) per call of each client
   */
  public static XinserveInterceptorProvider observations(ObjectProvider<ObservationRegistry> registry) {
    return name -> {
      ObservationRegistry r = registry.getIfAvailable();
      return r == null || r.isNoop() ? List.of() : List.of(new ObservationGrpcClientInterceptor(r));
    };
  }
}
