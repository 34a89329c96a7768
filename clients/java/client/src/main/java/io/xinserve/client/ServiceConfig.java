package io.xinserve.client;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The gRPC service config a client's channel starts with: the load-balancing policy under the TLS
 * fail-fast wrapper, and the retry policy (gRFC A6 {@code methodConfig.retryPolicy}) for the
 * xinserve services and {@code grpc.health.v1.Health}.
 */
final class ServiceConfig {
  /** Service names the client's retry policy applies to. */
  static final List<String> RETRIED_SERVICES =
      List.of(
          "xinserve.v1.InferenceService",
          "xinserve.v1.ModelService",
          "xinserve.v1.ServerService",
          "grpc.health.v1.Health");

  private ServiceConfig() {}

  /**
   * @param loadBalancingPolicy a registered policy name, or {@code null}/empty for {@code
   *     pick_first}
   * @param retry the retry policy; {@code null} or disabled for no {@code methodConfig}
   * @param missingCertificate the placeholder key manager of a TLS channel without a client
   *     certificate, or {@code null}
   * @return the service config as gRPC's {@code defaultServiceConfig} takes it (JSON-shaped maps,
   *     lists, strings and doubles)
   */
  static Map<String, Object> of(
      String loadBalancingPolicy, RetryPolicy retry, MissingClientCertificate missingCertificate) {
    Map<String, Object> config = new LinkedHashMap<>();
    // the chosen policy (gRPC's default pick_first if none) under the TLS fail-fast wrapper
    TlsFailFastLoadBalancerProvider.register();
    config.put(
        "loadBalancingConfig",
        List.of(
            TlsFailFastLoadBalancerProvider.config(
                loadBalancingPolicy != null && !loadBalancingPolicy.isEmpty()
                    ? loadBalancingPolicy
                    : "pick_first",
                missingCertificate == null ? null : missingCertificate.id())));
    if (retry != null && retry.enabled()) {
      List<Object> names = new ArrayList<>();
      for (String s : RETRIED_SERVICES) {
        names.add(Map.of("service", s));
      }
      Map<String, Object> policy = new LinkedHashMap<>();
      policy.put("maxAttempts", (double) retry.maxAttempts());
      policy.put("initialBackoff", protoDuration(retry.initialBackoff()));
      policy.put("maxBackoff", protoDuration(retry.maxBackoff()));
      policy.put("backoffMultiplier", retry.backoffMultiplier());
      policy.put("retryableStatusCodes", List.of("UNAVAILABLE"));
      Map<String, Object> methodConfig = new LinkedHashMap<>();
      methodConfig.put("name", names);
      methodConfig.put("retryPolicy", policy);
      config.put("methodConfig", List.of(methodConfig));
    }
    return config;
  }

  private static String protoDuration(Duration d) {
    return String.format(Locale.ROOT, "%d.%09ds", d.getSeconds(), d.getNano());
  }
}
