package io.xinserve.spring.boot;

import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.health.autoconfigure.contributor.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.health.contributor.CompositeHealthContributor;
import org.springframework.boot.health.contributor.HealthContributor;
import org.springframework.boot.health.contributor.HealthIndicator;
import org.springframework.context.annotation.Bean;

/**
 * The health contributor "xinserve" on Spring Boot 4's health API ({@code
 * org.springframework.boot.health}, module {@code spring-boot-health}): one {@link
 * XinserveServerHealthIndicator} per client of the {@link XinserveClients} registry (a composite
 * named by client when there are several; UNKNOWN with {@code clients: 0} when there is none). Off
 * with {@code xinserve.client.health.enabled=false} or {@code
 * management.health.xinserve.enabled=false}.
 *
 * <p>The one part of the starter written once per Spring Boot generation, because the health types
 * moved packages in Boot 4; what to build is decided by the shared {@link XinserveHealthCheck},
 * and everything else is {@link XinserveClientAutoConfiguration}, the same source in both
 * starters. {@code xinserve-spring-boot-starter} has its own for Boot 3's Actuator health API.
 */
@AutoConfiguration(after = XinserveClientAutoConfiguration.class)
@ConditionalOnClass({HealthIndicator.class, ConditionalOnEnabledHealthIndicator.class})
@ConditionalOnBean(XinserveClients.class)
@ConditionalOnProperty(prefix = "xinserve.client.health", name = "enabled", matchIfMissing = true)
@ConditionalOnEnabledHealthIndicator("xinserve")
public class XinserveHealthAutoConfiguration {

  /**
   * @param clients the registry
   * @param properties the properties ({@code xinserve.client.health.*})
   * @return the contributor "xinserve"
   */
  @Bean
  @ConditionalOnMissingBean(name = "xinserveHealthContributor")
  public HealthContributor xinserveHealthContributor(
      XinserveClients clients, XinserveClientProperties properties) {
    return XinserveHealthCheck.contributor(
        clients,
        properties.getHealth(),
        XinserveServerHealthIndicator::new,
        checks -> CompositeHealthContributor.fromMap(checks, XinserveServerHealthIndicator::new));
  }
}
