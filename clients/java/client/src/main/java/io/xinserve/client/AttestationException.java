package io.xinserve.client;

/**
 * An attestation does not bind the channel it was asked on, or its evidence did not verify, or the
 * evidence is malformed. Thrown by {@link ChannelAttestation#verify} and {@link EvidenceVerifier}s.
 */
public class AttestationException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** @param message what does not hold (safe to log: never holds evidence or keys) */
  public AttestationException(String message) {
    super(message);
  }

  /**
   * @param message what does not hold
   * @param cause the underlying failure
   */
  public AttestationException(String message, Throwable cause) {
    super(message, cause);
  }
}
