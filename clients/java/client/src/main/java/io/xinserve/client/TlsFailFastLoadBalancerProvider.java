package io.xinserve.client;

import io.grpc.ConnectivityState;
import io.grpc.LoadBalancer;
import io.grpc.LoadBalancerProvider;
import io.grpc.LoadBalancerRegistry;
import io.grpc.NameResolver.ConfigOrError;
import io.grpc.Status;
import io.grpc.util.ForwardingLoadBalancer;
import io.grpc.util.ForwardingLoadBalancerHelper;
import io.grpc.util.GracefulSwitchLoadBalancer;
import io.xinserve.client.errors.XinserveExceptions;
import java.util.List;
import java.util.Map;

/**
 * A gRPC load-balancing policy that wraps a child policy (service config {@code
 * {"xinserve_tls_fail_fast": {"childPolicy": [{"round_robin": {}}]}}}) and turns the child's
 * connection-failure picks whose cause is a TLS handshake or certificate failure into drops ({@link
 * LoadBalancer.PickResult#withDrop}).
 *
 * <p>Why: a failed TLS handshake makes the channel report {@code UNAVAILABLE}, the status the
 * client's retry policy retries. gRPC decides on retries below every interceptor, by status code
 * only; a dropped pick is the one outcome it never retries. So a server certificate the client does
 * not trust fails the call at its first attempt (as a {@link
 * io.xinserve.client.errors.TlsHandshakeException}), while other {@code UNAVAILABLE} failures
 * (connection refused, a restarting server) are still retried. Wait-for-ready calls keep the child's
 * decision: they wait for the channel as they asked.
 *
 * <p>With {@code "missingClientCertificate": "<id>"} in its config (a channel configured without a
 * client certificate, {@link MissingClientCertificate}), a connection failure after a server asked
 * for a client certificate is dropped the same way, as {@link MissingClientCertificate#status}: an
 * mTLS server that closes the connection without a TLS alert then fails the call at its first
 * attempt with a {@code TlsHandshakeException} naming the missing certificate.
 */
final class TlsFailFastLoadBalancerProvider extends LoadBalancerProvider {
  /** The policy's name in a service config. */
  static final String POLICY_NAME = "xinserve_tls_fail_fast";

  private static boolean registered;

  private TlsFailFastLoadBalancerProvider() {}

  /** Registers the policy with gRPC's default {@link LoadBalancerRegistry}, once per class loader. */
  static synchronized void register() {
    if (!registered) {
      LoadBalancerRegistry.getDefaultRegistry().register(new TlsFailFastLoadBalancerProvider());
      registered = true;
    }
  }

  /**
   * The service-config entry of this policy around a child policy.
   *
   * @param childPolicy a registered policy name such as {@code round_robin} or {@code pick_first}
   * @return {@code {"xinserve_tls_fail_fast": {"childPolicy": [{childPolicy: {}}]}}}
   */
  static Map<String, Object> config(String childPolicy) {
    return config(childPolicy, null);
  }

  /**
   * As {@link #config(String)}, naming the channel's {@link MissingClientCertificate}.
   *
   * @param childPolicy a registered policy name such as {@code round_robin} or {@code pick_first}
   * @param missingClientCertificate a {@link MissingClientCertificate#id()}, or {@code null}
   * @return the service-config entry
   */
  static Map<String, Object> config(String childPolicy, String missingClientCertificate) {
    Map<String, Object> inner = new java.util.LinkedHashMap<>();
    inner.put("childPolicy", List.of(Map.of(childPolicy, Map.of())));
    if (missingClientCertificate != null) {
      inner.put("missingClientCertificate", missingClientCertificate);
    }
    return Map.of(POLICY_NAME, inner);
  }

  /** The parsed config: the child's, and the channel's missing-certificate tracker id. */
  private record Config(Object child, String missingClientCertificate) {}

  @Override
  public boolean isAvailable() {
    return true;
  }

  @Override
  public int getPriority() {
    return 5;
  }

  @Override
  public String getPolicyName() {
    return POLICY_NAME;
  }

  @Override
  public LoadBalancer newLoadBalancer(LoadBalancer.Helper helper) {
    return new Balancer(helper);
  }

  @Override
  @SuppressWarnings("unchecked")
  public ConfigOrError parseLoadBalancingPolicyConfig(Map<String, ?> rawConfig) {
    Object child = rawConfig.get("childPolicy");
    if (!(child instanceof List<?> list) || list.isEmpty()) {
      return ConfigOrError.fromError(
          Status.INVALID_ARGUMENT.withDescription(POLICY_NAME + ": childPolicy is required"));
    }
    ConfigOrError parsed =
        GracefulSwitchLoadBalancer.parseLoadBalancingPolicyConfig((List<Map<String, ?>>) list);
    if (parsed.getError() != null) {
      return parsed;
    }
    Object id = rawConfig.get("missingClientCertificate");
    return ConfigOrError.fromConfig(
        new Config(parsed.getConfig(), id instanceof String s ? s : null));
  }

  /** Runs the child policy, wrapping each picker it publishes. */
  private static final class Balancer extends ForwardingLoadBalancer {
    private final GracefulSwitchLoadBalancer child;
    private volatile MissingClientCertificate missing;

    Balancer(LoadBalancer.Helper helper) {
      this.child =
          new GracefulSwitchLoadBalancer(
              new ForwardingLoadBalancerHelper() {
                @Override
                protected LoadBalancer.Helper delegate() {
                  return helper;
                }

                @Override
                public void updateBalancingState(
                    ConnectivityState state, LoadBalancer.SubchannelPicker picker) {
                  MissingClientCertificate m = missing;
                  if (state == ConnectivityState.READY && m != null) {
                    m.clear();
                  }
                  helper.updateBalancingState(state, new Picker(picker, m));
                }
              });
    }

    @Override
    protected LoadBalancer delegate() {
      return child;
    }

    @Override
    public Status acceptResolvedAddresses(LoadBalancer.ResolvedAddresses addresses) {
      if (addresses.getLoadBalancingPolicyConfig() instanceof Config config) {
        missing = MissingClientCertificate.lookup(config.missingClientCertificate());
        addresses = addresses.toBuilder().setLoadBalancingPolicyConfig(config.child()).build();
      }
      return child.acceptResolvedAddresses(addresses);
    }
  }

  /** Drops (never retried) a non-wait-for-ready call that would fail on a TLS failure. */
  private static final class Picker extends LoadBalancer.SubchannelPicker {
    private final LoadBalancer.SubchannelPicker delegate;
    private final MissingClientCertificate missing;

    Picker(LoadBalancer.SubchannelPicker delegate, MissingClientCertificate missing) {
      this.delegate = delegate;
      this.missing = missing;
    }

    @Override
    public LoadBalancer.PickResult pickSubchannel(LoadBalancer.PickSubchannelArgs args) {
      LoadBalancer.PickResult result = delegate.pickSubchannel(args);
      Status status = result.getStatus();
      if (!status.isOk()
          && !result.isDrop()
          && !args.getCallOptions().isWaitForReady()
          && status.getCode() == Status.Code.UNAVAILABLE) {
        if (missing != null && missing.requested()) {
          return LoadBalancer.PickResult.withDrop(MissingClientCertificate.status(status));
        }
        if (XinserveExceptions.isTlsHandshakeFailure(status)) {
          return LoadBalancer.PickResult.withDrop(status);
        }
      }
      return result;
    }

    @Override
    public String toString() {
      return POLICY_NAME + "(" + delegate + ")";
    }
  }
}
