package io.xinserve.spring.boot;

import org.springframework.boot.actuate.autoconfigure.health.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.actuate.health.CompositeHealthContributor;
import org.springframework.boot.actuate.health.HealthContributor;
import org.springframework.boot.actuate.health.HealthIndicator;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.context.annotation.Bean;

/**
 * The health contributor "xinserve" on Actuator's (Spring Boot 3, {@code
 * org.springframework.boot.actuate.health}) health API: one {@link XinserveHealthIndicator} per
 * client of the {@link XinserveClients} registry (a composite named by client when there are
 * several; UNKNOWN with {@code clients: 0} when there is none). Off with {@code
 * xinserve.client.health.enabled=false} or {@code management.health.xinserve.enabled=false}.
 *
 * <p>The one part of the starter written once per Spring Boot generation, because the health types
 * moved packages in Boot 4; what to build is decided by the shared {@link XinserveHealthCheck},
 * and everything else is {@link XinserveClientAutoConfiguration}, the same source in both
 * starters. {@code xinserve-spring-boot4-starter} has its own for Boot 4's moved health API.
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
        XinserveHealthIndicator::new,
        checks -> CompositeHealthContributor.fromMap(checks, XinserveHealthIndicator::new));
  }
}
