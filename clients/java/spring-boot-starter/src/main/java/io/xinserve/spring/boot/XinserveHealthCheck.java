package io.xinserve.spring.boot;

import io.grpc.ConnectivityState;
import io.grpc.Status;
import io.grpc.health.v1.HealthCheckResponse;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.XinserveException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.Function;

/**
 * The health of one xinserve server as a client sees it, independent of Actuator's types (which
 * moved between Spring Boot 3 and 4):
 *
 * <ol>
 *   <li>the standard {@code grpc.health.v1.Health/Check} with a short deadline: SERVING goes on,
 *       NOT_SERVING is OUT_OF_SERVICE (starting or draining), anything else DOWN;
 *   <li>then {@code ServerService/GetServerInfo} with the client's credentials, because the
 *       health service answers without checking them: UNAUTHENTICATED or PERMISSION_DENIED (a
 *       wrong or expired token, a refused client certificate) is DOWN, success is UP.
 * </ol>
 *
 * A check whose deadline passes while the channel is still connecting (the first check after
 * start-up, before the first connection attempt has ended) is UNKNOWN; once an attempt has failed
 * (a refused port, a TLS handshake or certificate failure) it is DOWN. Details: {@code target},
 * {@code servingStatus}, and for a failed check {@code code}, {@code channel} and {@code error}
 * (the exception's class and message, as Actuator's {@code Health.down(Throwable)} gives it).
 */
public final class XinserveHealthCheck {
  /** Actuator's status codes. */
  public enum Outcome {
    /** SERVING and the credentials were accepted. */
    UP,
    /** The server or the credentials failed. */
    DOWN,
    /** NOT_SERVING: starting or draining. */
    OUT_OF_SERVICE,
    /** Not connected yet. */
    UNKNOWN
  }

  /**
   * @param outcome the status
   * @param details the details, in order
   */
  public record Result(Outcome outcome, Map<String, Object> details) {}

  private final XinserveClient client;
  private final String service;
  private final Duration timeout;

  /**
   * @param client the client to check through (its credentials are used); {@code null} for a
   *     registry without clients, which is UNKNOWN with the detail {@code clients: 0}
   * @param service the service name to check ({@code ""} for the whole server)
   * @param timeout the deadline of each of the two calls
   */
  public XinserveHealthCheck(XinserveClient client, String service, Duration timeout) {
    this.client = client;
    this.service = service;
    this.timeout = timeout;
  }

  /**
   * The health contributor "xinserve" of a registry, made of a Spring Boot generation's own health
   * types (they moved packages in Boot 4; this decides what to build, the caller builds it).
   *
   * @param <C> the generation's {@code HealthContributor} type
   * @param clients the registry
   * @param health the health properties (service name, deadline)
   * @param indicator makes the indicator that reports one check
   * @param composite makes the composite of several checks, by client name
   * @return the one client's indicator (UNKNOWN with {@code clients: 0} when the registry is
   *     empty), or the composite of all clients in the registry's order
   */
  static <C> C contributor(
      XinserveClients clients,
      XinserveClientProperties.Health health,
      Function<XinserveHealthCheck, ? extends C> indicator,
      Function<Map<String, XinserveHealthCheck>, ? extends C> composite) {
    Map<String, XinserveHealthCheck> checks = perClient(clients, health);
    if (checks.size() > 1) {
      return composite.apply(checks);
    }
    return indicator.apply(
        checks.isEmpty() ? new XinserveHealthCheck(null, "", Duration.ZERO) : checks.values().iterator().next());
  }

  /**
   * @param clients the registry
   * @param health the health properties (service name, deadline)
   * @return one check per client, by client name, in the registry's order
   */
  private static Map<String, XinserveHealthCheck> perClient(
      XinserveClients clients, XinserveClientProperties.Health health) {
    Map<String, XinserveHealthCheck> checks = new LinkedHashMap<>();
    clients
        .asMap()
        .forEach(
            (name, client) ->
                checks.put(
                    name, new XinserveHealthCheck(client, health.getService(), health.getTimeout())));
    return checks;
  }

  /** @return the result of one check; never throws */
  public Result check() {
    Map<String, Object> d = new LinkedHashMap<>();
    if (client == null) {
      d.put("clients", 0);
      return new Result(Outcome.UNKNOWN, d);
    }
    d.put("target", client.target());
    ConnectivityState before = client.connectivityState(true);
    HealthCheckResponse.ServingStatus s;
    try {
      s = client.checkHealth(service, timeout);
    } catch (XinserveException e) {
      boolean connecting =
          before == ConnectivityState.IDLE || before == ConnectivityState.CONNECTING;
      d.put("code", e.code().name());
      d.put("channel", before.name());
      d.put("error", error(e));
      return new Result(
          connecting && e.code() == Status.Code.DEADLINE_EXCEEDED ? Outcome.UNKNOWN : Outcome.DOWN, d);
    }
    d.put("servingStatus", s.name());
    if (s != HealthCheckResponse.ServingStatus.SERVING) {
      return new Result(
          s == HealthCheckResponse.ServingStatus.NOT_SERVING ? Outcome.OUT_OF_SERVICE : Outcome.DOWN, d);
    }
    try {
      client.withDeadline(timeout).serverInfo();
    } catch (XinserveException e) {
      d.put("code", e.code().name());
      d.put("error", error(e));
      return new Result(Outcome.DOWN, d);
    }
    return new Result(Outcome.UP, d);
  }

  private static String error(XinserveException e) {
    return e.getClass().getName() + ": " + e.getMessage();
  }
}
