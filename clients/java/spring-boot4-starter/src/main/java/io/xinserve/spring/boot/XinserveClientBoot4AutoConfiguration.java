package io.xinserve.spring.boot;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.binder.grpc.ObservationGrpcClientInterceptor;
import io.micrometer.observation.ObservationRegistry;
import io.micrometer.tracing.Tracer;
import io.micrometer.tracing.propagation.Propagator;
import io.xinserve.client.XinserveClient;
import java.util.LinkedHashMap;
import java.util.Map;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.SpringBootVersion;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.ssl.SslAutoConfiguration;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.health.autoconfigure.contributor.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.health.contributor.CompositeHealthContributor;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthContributor;
import org.springframework.boot.health.contributor.HealthIndicator;
import org.springframework.boot.ssl.SslBundles;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Primary;

/**
 * Spring Boot 4 auto-configuration of xinserve clients: the same {@code xinserve.client.*}
 * properties and beans as the Boot 3 starter's {@code XinserveClientAutoConfiguration} (a {@link
 * XinserveClients} registry, the default {@link XinserveClient}, Micrometer meters, an Observation
 * per call, trace propagation), with the health contributor "xinserve" on Boot 4's {@code
 * org.springframework.boot.health} API. Every bean backs off when the application defines its own.
 *
 * <p>On Spring Boot 3 the context fails to start, naming {@code xinserve-spring-boot-starter}.
 */
@AutoConfiguration(after = SslAutoConfiguration.class)
@ConditionalOnClass(XinserveClient.class)
@ConditionalOnProperty(prefix = "xinserve.client", name = "enabled", matchIfMissing = true)
@EnableConfigurationProperties(XinserveClientProperties.class)
public class XinserveClientBoot4AutoConfiguration {

  /** Fails at start-up on a Spring Boot generation other than 4. */
  public XinserveClientBoot4AutoConfiguration() {
    BootGeneration.require(
        SpringBootVersion.getVersion(), 4, "xinserve-spring-boot4-starter", "xinserve-spring-boot-starter");
  }

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
    return XinserveClientBeans.factory(sslBundles, headers, customizers, interceptors);
  }

  /**
   * @param factory the client factory
   * @param properties the properties
   * @return all configured clients by name
   */
  @Bean
  @ConditionalOnMissingBean({XinserveClients.class, XinserveClient.class})
  public XinserveClients xinserveClients(
      XinserveClientFactory factory, XinserveClientProperties properties) {
    return XinserveClientBeans.clients(factory, properties, null);
  }

  /**
   * @param factory the client factory
   * @param properties the properties
   * @param own the application's client, which becomes the default client
   * @return all clients by name
   */
  @Bean
  @ConditionalOnMissingBean(XinserveClients.class)
  @ConditionalOnBean(XinserveClient.class)
  public XinserveClients xinserveClientsWithApplicationClient(
      XinserveClientFactory factory, XinserveClientProperties properties, XinserveClient own) {
    return XinserveClientBeans.clients(factory, properties, own);
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

  /** Micrometer meters. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(MeterRegistry.class)
  @ConditionalOnProperty(prefix = "xinserve.client.metrics", name = "enabled", matchIfMissing = true)
  static class MetricsConfiguration {
    @Bean
    @ConditionalOnMissingBean(name = "xinserveMetricsInterceptorProvider")
    XinserveInterceptorProvider xinserveMetricsInterceptorProvider(ObjectProvider<MeterRegistry> registry) {
      return XinserveClientBeans.metrics(registry);
    }
  }

  /** One Micrometer Observation per call. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass({ObservationRegistry.class, ObservationGrpcClientInterceptor.class})
  @ConditionalOnProperty(prefix = "xinserve.client.observations", name = "enabled", matchIfMissing = true)
  static class ObservationConfiguration {
    @Bean
    @ConditionalOnMissingBean(name = "xinserveObservationInterceptorProvider")
    XinserveInterceptorProvider xinserveObservationInterceptorProvider(
        ObjectProvider<ObservationRegistry> registry) {
      return XinserveClientBeans.observations(registry);
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

  /** Health, when Spring Boot 4's health module is on the class path. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass({HealthIndicator.class, ConditionalOnEnabledHealthIndicator.class})
  @ConditionalOnProperty(prefix = "xinserve.client.health", name = "enabled", matchIfMissing = true)
  @ConditionalOnEnabledHealthIndicator("xinserve")
  static class HealthConfiguration {
    @Bean
    @ConditionalOnMissingBean(name = "xinserveHealthContributor")
    HealthContributor xinserveHealthContributor(
        XinserveClients clients, XinserveClientProperties properties) {
      XinserveClientProperties.Health h = properties.getHealth();
      Map<String, HealthIndicator> indicators = new LinkedHashMap<>();
      clients
          .asMap()
          .forEach(
              (name, client) ->
                  indicators.put(
                      name, new XinserveServerHealthIndicator(client, h.getService(), h.getTimeout())));
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
