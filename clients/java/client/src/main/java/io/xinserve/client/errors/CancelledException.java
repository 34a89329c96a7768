package io.xinserve.client.errors;

/**
 * The call was cancelled, by the caller (closing a stream, cancelling a future or a subscription) or by the server (for example an Abort of its request id).
 *
 * <p>gRPC status {@code CANCELLED}.
 */
public class CancelledException extends XinserveException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public CancelledException(ErrorDetails details, Throwable cause) {
    super(details, cause);
  }
}
