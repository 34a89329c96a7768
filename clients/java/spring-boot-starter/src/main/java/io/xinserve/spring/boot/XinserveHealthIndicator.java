package io.xinserve.spring.boot;

import io.grpc.health.v1.HealthCheckResponse;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.XinserveException;
import java.time.Duration;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthIndicator;

/**
 * Actuator health of one xinserve server, from the standard {@code grpc.health.v1.Health/Check}
 * with a short deadline: SERVING is UP, NOT_SERVING is OUT_OF_SERVICE (starting or draining),
 * anything else (including a failed check) is DOWN.
 */
public class XinserveHealthIndicator implements HealthIndicator {
  private final XinserveClient client;
  private final String service;
  private final Duration timeout;

  /**
   * @param client the client to check through
   * @param service the service name to check ({@code ""} for the whole server)
   * @param timeout the check's deadline
   */
  public XinserveHealthIndicator(XinserveClient client, String service, Duration timeout) {
    this.client = client;
    this.service = service;
    this.timeout = timeout;
  }

  @Override
  public Health health() {
    try {
      HealthCheckResponse.ServingStatus s = client.checkHealth(service, timeout);
      Health.Builder b =
          switch (s) {
            case SERVING -> Health.up();
            case NOT_SERVING -> Health.outOfService();
            default -> Health.down();
          };
      return b.withDetail("servingStatus", s.name()).build();
    } catch (XinserveException e) {
      return Health.down().withDetail("code", e.code().name()).build();
    }
  }
}
