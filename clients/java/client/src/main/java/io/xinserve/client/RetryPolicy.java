package io.xinserve.client;

import java.time.Duration;
import java.util.Objects;

/**
 * How the client retries calls that fail with {@code UNAVAILABLE}, through gRPC's retry support
 * (the channel's service config). A call is retried only while it is not yet committed: once the
 * server has sent response headers or the first streamed token, a failure is reported to the caller
 * and never retried, so a generation is never silently restarted. A TLS handshake or certificate
 * failure is never retried either: it fails the first attempt with {@link
 * io.xinserve.client.errors.TlsHandshakeException}.
 *
 * @param maxAttempts total attempts including the first, 1 (no retries) .. 5
 * @param initialBackoff backoff before the first retry (randomised by gRPC, as the spec says)
 * @param maxBackoff upper bound of any backoff
 * @param backoffMultiplier growth of the backoff per attempt, &gt; 0
 */
public record RetryPolicy(
    int maxAttempts, Duration initialBackoff, Duration maxBackoff, double backoffMultiplier) {

  /** Checks the values. */
  public RetryPolicy {
    if (maxAttempts < 1 || maxAttempts > 5) {
      throw new IllegalArgumentException("maxAttempts must be 1..5, got " + maxAttempts);
    }
    Objects.requireNonNull(initialBackoff, "initialBackoff");
    Objects.requireNonNull(maxBackoff, "maxBackoff");
    if (initialBackoff.isNegative() || initialBackoff.isZero()) {
      throw new IllegalArgumentException("initialBackoff must be > 0");
    }
    if (maxBackoff.compareTo(initialBackoff) < 0) {
      throw new IllegalArgumentException("maxBackoff must be >= initialBackoff");
    }
    if (!(backoffMultiplier > 0)) {
      throw new IllegalArgumentException("backoffMultiplier must be > 0");
    }
  }

  /**
   * @return the default: 3 attempts, 200 ms initial backoff, 2 s maximum, multiplier 2
   */
  public static RetryPolicy defaults() {
    return new RetryPolicy(3, Duration.ofMillis(200), Duration.ofSeconds(2), 2.0);
  }

  /** @return a policy that never retries */
  public static RetryPolicy none() {
    return new RetryPolicy(1, Duration.ofMillis(200), Duration.ofSeconds(2), 2.0);
  }

  /** @return whether this policy retries at all */
  public boolean enabled() {
    return maxAttempts > 1;
  }
}
