package io.xinserve.client.errors;

/**
 * The caller is authenticated but not allowed to make this call.
 *
 * <p>gRPC status {@code PERMISSION_DENIED}.
 */
public class PermissionDeniedException extends XinserveException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public PermissionDeniedException(ErrorDetails details, Throwable cause) {
    super(details, cause);
  }
}
