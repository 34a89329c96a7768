package io.xinserve.spring.boot;

import io.xinserve.client.XinserveClient;
import java.time.Duration;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthIndicator;

/**
 * Spring Boot 4 health ({@code org.springframework.boot.health}) of one xinserve server as this
 * client sees it; see {@link XinserveHealthCheck} for what is checked and how it maps to UP, DOWN,
 * OUT_OF_SERVICE and UNKNOWN.
 */
public class XinserveServerHealthIndicator implements HealthIndicator {
  private final XinserveHealthCheck check;

  /**
   * @param client the client to check through (its credentials are used)
   * @param service the service name to check ({@code ""} for the whole server)
   * @param timeout the deadline of each of the two calls
   */
  public XinserveServerHealthIndicator(XinserveClient client, String service, Duration timeout) {
    this.check = new XinserveHealthCheck(client, service, timeout);
  }

  @Override
  public Health health() {
    XinserveHealthCheck.Result r = check.check();
    Health.Builder b =
        switch (r.outcome()) {
          case UP -> Health.up();
          case DOWN -> Health.down();
          case OUT_OF_SERVICE -> Health.outOfService();
          case UNKNOWN -> Health.unknown();
        };
    return b.withDetails(r.details()).build();
  }
}
