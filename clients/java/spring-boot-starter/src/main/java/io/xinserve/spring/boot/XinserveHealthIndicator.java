package io.xinserve.spring.boot;

import io.grpc.ConnectivityState;
import io.grpc.Status;
import io.grpc.health.v1.HealthCheckResponse;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.XinserveException;
import java.time.Duration;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthIndicator;

/**
 * Actuator health of one xinserve server as this client sees it:
 *
 * <ol>
 *   <li>the standard {@code grpc.health.v1.Health/Check} with a short deadline: SERVING goes on,
 *       NOT_SERVING is OUT_OF_SERVICE (starting or draining), anything else DOWN;
 *   <li>then {@code ServerService/GetServerInfo} with the client's credentials, because the
 *       health service answers without checking them: UNAUTHENTICATED or PERMISSION_DENIED (a
 *       wrong or expired token, a refused client certificate) is DOWN, success is UP.
 * </ol>
 *
 * A check that fails while the channel is still connecting (the first check after start-up) is
 * UNKNOWN, not DOWN. Details: {@code target}, {@code servingStatus}, and {@code code} of a failed
 * check.
 */
public class XinserveHealthIndicator implements HealthIndicator {
  private final XinserveClient client;
  private final String service;
  private final Duration timeout;

  /**
   * @param client the client to check through (its credentials are used)
   * @param service the service name to check ({@code ""} for the whole server)
   * @param timeout the deadline of each of the two calls
   */
  public XinserveHealthIndicator(XinserveClient client, String service, Duration timeout) {
    this.client = client;
    this.service = service;
    this.timeout = timeout;
  }

  @Override
  public Health health() {
    ConnectivityState before = client.connectivityState(true);
    HealthCheckResponse.ServingStatus s;
    try {
      s = client.checkHealth(service, timeout);
    } catch (XinserveException e) {
      boolean connecting =
          before == ConnectivityState.IDLE || before == ConnectivityState.CONNECTING;
      boolean transientFailure =
          e.code() == Status.Code.DEADLINE_EXCEEDED || e.code() == Status.Code.UNAVAILABLE;
      Health.Builder b = connecting && transientFailure ? Health.unknown() : Health.down();
      return b.withDetail("target", client.target())
          .withDetail("code", e.code().name())
          .withDetail("channel", before.name())
          .build();
    }
    if (s != HealthCheckResponse.ServingStatus.SERVING) {
      Health.Builder b =
          s == HealthCheckResponse.ServingStatus.NOT_SERVING ? Health.outOfService() : Health.down();
      return b.withDetail("target", client.target()).withDetail("servingStatus", s.name()).build();
    }
    try {
      client.withDeadline(timeout).serverInfo();
    } catch (XinserveException e) {
      return Health.down()
          .withDetail("target", client.target())
          .withDetail("servingStatus", s.name())
          .withDetail("code", e.code().name())
          .build();
    }
    return Health.up()
        .withDetail("target", client.target())
        .withDetail("servingStatus", s.name())
        .build();
  }
}
