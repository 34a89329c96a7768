package io.xinserve.spring.boot;

import io.grpc.ClientInterceptor;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.tracing.Tracer;
import io.micrometer.tracing.propagation.Propagator;
import io.xinserve.client.XinserveClient;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.actuate.health.CompositeHealthContributor;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthContributor;
import org.springframework.boot.actuate.health.HealthIndicator;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.ssl.SslAutoConfiguration;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.ssl.SslBundles;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Primary;
import org.springframework.util.StringUtils;

/**
 * Auto-configures xinserve clients from {@code xinserve.client.*}: a {@link XinserveClients}
 * registry with the default and named clients, the default {@link XinserveClient} bean (when
 * {@code xinserve.client.address} is set), an Actuator health contributor "xinserve", Micrometer
 * meters and trace propagation. Every bean backs off when the application defines its own.
 */
@AutoConfiguration(after = SslAutoConfiguration.class)
@ConditionalOnClass(XinserveClient.class)
@ConditionalOnProperty(prefix = "xinserve.client", name = "enabled", matchIfMissing = true)
@EnableConfigurationProperties(XinserveClientProperties.class)
public class XinserveClientAutoConfiguration {

  /**
   * @param sslBundles SSL bundles, if any
   * @param headers header contributors
   * @param customizers builder customizers
   * @param interceptors interceptor providers
   * @return the factory that builds every client
   */
  @Bean
  @ConditionalOnMissingBean
  public XinserveClientFactory xinserveClientFactory(
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
   * @return all configured clients by name
   */
  @Bean
  @ConditionalOnMissingBean
  public XinserveClients xinserveClients(
      XinserveClientFactory factory, XinserveClientProperties properties) {
    Map<String, XinserveClient> clients = new LinkedHashMap<>();
    if (StringUtils.hasText(properties.getAddress())) {
      clients.put(XinserveClients.DEFAULT, factory.create(XinserveClients.DEFAULT, properties, null));
    }
    properties.getClients().forEach((name, s) -> clients.put(name, factory.create(name, s, properties)));
    return new XinserveClients(clients);
  }

  /**
   * @param clients the registry
   * @return the default client (closed by the registry)
   */
  @Bean(destroyMethod = "")
  @Primary
  @ConditionalOnMissingBean(XinserveClient.class)
  @ConditionalOnProperty(prefix = "xinserve.client", name = "address")
  public XinserveClient xinserveClient(XinserveClients clients) {
    return clients.get(XinserveClients.DEFAULT);
  }

  /** Micrometer meters, when Micrometer is on the class path and a MeterRegistry bean exists. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(MeterRegistry.class)
  @ConditionalOnProperty(prefix = "xinserve.client.metrics", name = "enabled", matchIfMissing = true)
  static class MetricsConfiguration {
    @Bean
    @ConditionalOnMissingBean(name = "xinserveMetricsInterceptorProvider")
    XinserveInterceptorProvider xinserveMetricsInterceptorProvider(ObjectProvider<MeterRegistry> registry) {
      return name -> {
        MeterRegistry r = registry.getIfAvailable();
        return r == null ? List.of() : List.of(new XinserveMetricsInterceptor(r, name));
      };
    }
  }

  /** traceparent propagation, when Micrometer Tracing is on the class path. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass({Tracer.class, Propagator.class})
  static class TracingConfiguration {
    @Bean
    @ConditionalOnMissingBean
    TracingCallHeaders xinserveTracingCallHeaders(
        ObjectProvider<Tracer> tracer, ObjectProvider<Propagator> propagator) {
      return new TracingCallHeaders(tracer, propagator);
    }
  }

  /** Actuator health, when Spring Boot Actuator is on the class path. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(HealthIndicator.class)
  @ConditionalOnProperty(prefix = "xinserve.client.health", name = "enabled", matchIfMissing = true)
  static class HealthConfiguration {
    @Bean
    @ConditionalOnMissingBean(name = "xinserveHealthContributor")
    HealthContributor xinserveHealthContributor(
        XinserveClients clients, XinserveClientProperties properties) {
      XinserveClientProperties.Health h = properties.getHealth();
      Map<String, HealthIndicator> indicators =
          clients.asMap().entrySet().stream()
              .collect(
                  Collectors.toMap(
                      Map.Entry::getKey,
                      e -> new XinserveHealthIndicator(e.getValue(), h.getService(), h.getTimeout()),
                      (a, b) -> a,
                      LinkedHashMap::new));
      if (indicators.isEmpty()) {
        return (HealthIndicator) () -> Health.unknown().withDetail("clients", 0).build();
      }
      if (indicators.size() == 1) {
        return indicators.values().iterator().next();
      }
      return CompositeHealthContributor.fromMap(indicators);
    }
  }
}
