package io.xinserve.client.errors;

/**
 * The request cannot be served in the server's current state, e.g. the model failed verification or is of the wrong kind (embedding model used for generation).
 *
 * <p>gRPC status {@code FAILED_PRECONDITION}.
 */
public class FailedPreconditionException extends XinserveException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public FailedPreconditionException(ErrorDetails details, Throwable cause) {
    super(details, cause);
  }
}
