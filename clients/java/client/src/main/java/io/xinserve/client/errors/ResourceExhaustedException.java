package io.xinserve.client.errors;

/**
 * The server's admission control is full (or a quota is used up). {@link #retryDelay()} tells how
 * long the server asks the caller to wait, when it said so ({@code google.rpc.RetryInfo}).
 *
 * <p>gRPC status {@code RESOURCE_EXHAUSTED}.
 */
public class ResourceExhaustedException extends XinserveException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public ResourceExhaustedException(ErrorDetails details, Throwable cause) {
    super(details, cause);
  }
}
