package io.xinserve.spring.boot;

import io.xinserve.client.XinserveClient;
import java.time.Duration;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthIndicator;

/**
 * Actuator (Spring Boot 3) health of one xinserve server as this client sees it; see {@link XinserveHealthCheck} for what is checked and how it maps to UP, DOWN,
 * OUT_OF_SERVICE and UNKNOWN (Spring Boot's status codes).
 */
public class XinserveHealthIndicator implements HealthIndicator {
  private final XinserveHealthCheck check;

  /**
   * @param client the client to check through (its credentials are used)
   * @param service the service name to check ({@code ""} for the whole server)
   * @param timeout the deadline of each of the two calls
   */
  public XinserveHealthIndicator(XinserveClient client, String service, Duration timeout) {
    this(new XinserveHealthCheck(client, service, timeout));
  }

  /** @param check the check to report */
  public XinserveHealthIndicator(XinserveHealthCheck check) {
    this.check = check;
  }

  @Override
  public Health health() {
    XinserveHealthCheck.Result r = check.check();
    return Health.status(r.outcome().name()).withDetails(r.details()).build();
  }
}
