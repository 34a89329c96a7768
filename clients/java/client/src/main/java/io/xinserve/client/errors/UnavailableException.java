package io.xinserve.client.errors;

/**
 * The server is starting, draining or unreachable. Safe to retry; the client already retried unary calls and streams that had not yet produced a token, as its retry policy allows.
 *
 * <p>gRPC status {@code UNAVAILABLE}.
 */
public class UnavailableException extends XinserveException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public UnavailableException(ErrorDetails details, Throwable cause) {
    super(details, cause);
  }
}
