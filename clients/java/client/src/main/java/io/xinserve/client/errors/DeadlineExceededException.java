package io.xinserve.client.errors;

/**
 * The call's deadline passed before it completed; the server aborts the engine request. For streams, tokens already received are valid but the generation is incomplete.
 *
 * <p>gRPC status {@code DEADLINE_EXCEEDED}.
 */
public class DeadlineExceededException extends XinserveException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public DeadlineExceededException(ErrorDetails details, Throwable cause) {
    super(details, cause);
  }
}
