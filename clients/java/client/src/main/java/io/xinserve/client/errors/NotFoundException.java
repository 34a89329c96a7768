package io.xinserve.client.errors;

/**
 * The model (or LoRA adapter) named in the request is not known to the server.
 *
 * <p>gRPC status {@code NOT_FOUND}.
 */
public class NotFoundException extends XinserveException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public NotFoundException(ErrorDetails details, Throwable cause) {
    super(details, cause);
  }
}
