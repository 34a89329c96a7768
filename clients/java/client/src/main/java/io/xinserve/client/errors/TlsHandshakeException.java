package io.xinserve.client.errors;

/**
 * The TLS handshake with the server failed: the server's certificate is not trusted, has expired or
 * does not match the target name, or the server refused the client certificate. The message names
 * the TLS failure. Trying again does not help until the certificates or trust settings change, so
 * {@link #isRetryable()} is {@code false}.
 *
 * <p>gRPC status {@code UNAVAILABLE} whose cause is an {@link javax.net.ssl.SSLException} or a
 * {@link java.security.cert.CertificateException}.
 */
public class TlsHandshakeException extends XinserveException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status, its message naming the TLS failure
   * @param cause the underlying gRPC exception
   */
  public TlsHandshakeException(ErrorDetails details, Throwable cause) {
    super(details, cause);
  }

  /** @return {@code false}: the same handshake fails again */
  @Override
  public boolean isRetryable() {
    return false;
  }
}
