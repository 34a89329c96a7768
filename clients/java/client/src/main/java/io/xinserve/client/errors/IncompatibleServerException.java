package io.xinserve.client.errors;

/**
 * Thrown by {@link io.xinserve.client.XinserveClient#checkCompatibility()} (client side, no RPC
 * status): the server's {@code min_client_revision} is above {@link
 * io.xinserve.client.XinserveClient#SCHEMA_REVISION}, the {@code xinserve.v1} contract revision
 * this client implements. The code is {@code FAILED_PRECONDITION}, as for the Python client's
 * {@code IncompatibleServerError}.
 */
public class IncompatibleServerException extends FailedPreconditionException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception.
   *
   * @param details the details, with code {@code FAILED_PRECONDITION}
   */
  public IncompatibleServerException(ErrorDetails details) {
    super(details, null);
  }
}
