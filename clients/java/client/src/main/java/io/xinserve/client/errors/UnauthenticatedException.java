package io.xinserve.client.errors;

/**
 * The call carried no valid credentials: a missing, unknown or expired bearer token, or no client certificate where the server requires one.
 *
 * <p>gRPC status {@code UNAUTHENTICATED}.
 */
public class UnauthenticatedException extends XinserveException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public UnauthenticatedException(ErrorDetails details, Throwable cause) {
    super(details, cause);
  }
}
