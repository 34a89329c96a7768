package io.xinserve.spring.boot;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.binder.grpc.ObservationGrpcClientInterceptor;
import io.micrometer.observation.ObservationRegistry;
import io.micrometer.tracing.Tracer;
import io.micrometer.tracing.propagation.Propagator;
import io.xinserve.client.XinserveClient;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.ssl.SslAutoConfiguration;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.ssl.SslBundles;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Primary;

/**
 * Auto-configures xinserve clients from {@code xinserve.client.*}: a {@link XinserveClients}
 * registry with the default and named clients, the default {@link XinserveClient} bean (when
 * {@code xinserve.client.address} is set), Micrometer meters, a Micrometer {@code Observation} per
 * call (a client span when tracing is on) and trace propagation; the health contributor
 * "xinserve" comes from {@link XinserveHealthAutoConfiguration}. Every bean backs off when the
 * application defines its own; an application's own {@link XinserveClient} bean becomes the
 * registry's default client, so health and the Spring AI models use it instead of a second channel
 * built from properties.
 *
 * <p>The same source in both starters ({@code xinserve-spring-boot-starter} for Spring Boot 3.5,
 * {@code xinserve-spring-boot4-starter} for 4.0): it uses nothing that Boot 4 moved. On the other
 * generation the context fails to start, naming the starter to use.
 */
@AutoConfiguration(after = SslAutoConfiguration.class)
@ConditionalOnClass(XinserveClient.class)
@ConditionalOnProperty(prefix = "xinserve.client", name = "enabled", matchIfMissing = true)
@EnableConfigurationProperties(XinserveClientProperties.class)
public class XinserveClientAutoConfiguration {

  /** Fails at start-up on a Spring Boot generation other than the one this jar was built for. */
  public XinserveClientAutoConfiguration() {
    BootGeneration.requireBuiltGeneration();
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
   * The registry when the application defines its own {@link XinserveClient}: that bean is the
   * default client (not closed by the registry; its own bean definition does that), named clients
   * come from properties as usual.
   *
   * @param factory the client factory
   * @param properties the properties
   * @param own the application's client
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

  /** Micrometer meters, when Micrometer is on the class path and a MeterRegistry bean exists. */
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

  /**
   * One Micrometer {@code Observation} per call ({@code grpc.client}, by Micrometer's
   * ObservationGrpcClientInterceptor), when an ObservationRegistry bean exists: with Micrometer
   * Tracing each call is a client span, and its trace context is what the server receives.
   */
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
}
