package io.xinserve.client;

import io.grpc.Status;
import java.lang.ref.WeakReference;
import java.net.Socket;
import java.security.Principal;
import java.security.PrivateKey;
import java.security.cert.X509Certificate;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLHandshakeException;
import javax.net.ssl.X509ExtendedKeyManager;

/**
 * The key manager of a TLS channel configured without a client certificate: it presents none, and
 * records that a server asked for one (a TLS {@code CertificateRequest}, RFC 8446 §4.3.2), which
 * the JSSE and OpenSSL engines report by asking the key manager for a client alias.
 *
 * <p>A TLS 1.3 server that requires a client certificate checks it only after the client's
 * handshake has finished; gRPC C-core servers then close the connection without a TLS alert, so
 * the client sees {@code UNAVAILABLE: Network closed for unknown reason}, a status its retry policy
 * retries. {@link TlsFailFastLoadBalancerProvider} looks the channel's instance up by {@link #id()}
 * (named in its service config) and turns such a failure into {@link #status(Status)}, a TLS
 * failure that is not retried.
 */
final class MissingClientCertificate extends X509ExtendedKeyManager {
  /** Weak: the channel's TLS context holds its instance; a collected channel's entry is pruned. */
  private static final Map<String, WeakReference<MissingClientCertificate>> CHANNELS =
      new ConcurrentHashMap<>();

  private final String id = UUID.randomUUID().toString();
  private volatile boolean requested;

  private MissingClientCertificate() {}

  /** @return a new instance, registered under {@link #id()} while it is reachable */
  static MissingClientCertificate register() {
    CHANNELS.values().removeIf(ref -> ref.get() == null);
    MissingClientCertificate m = new MissingClientCertificate();
    CHANNELS.put(m.id, new WeakReference<>(m));
    return m;
  }

  /**
   * @param id an {@link #id()}, or {@code null}
   * @return the registered instance, or {@code null}
   */
  static MissingClientCertificate lookup(String id) {
    WeakReference<MissingClientCertificate> ref = id == null ? null : CHANNELS.get(id);
    return ref == null ? null : ref.get();
  }

  /** @return the id the load-balancing config names */
  String id() {
    return id;
  }

  /** @return whether a server asked for a client certificate since the last {@link #clear()} */
  boolean requested() {
    return requested;
  }

  /** Forgets a request: a connection became ready, so the server accepted the missing certificate. */
  void clear() {
    requested = false;
  }

  /**
   * @param failure the connection failure ({@code UNAVAILABLE})
   * @return {@code UNAVAILABLE} caused by an {@link SSLHandshakeException} naming the missing client
   *     certificate and the original failure
   */
  static Status status(Status failure) {
    String message =
        "the server requires a client certificate (mutual TLS) and none is configured:"
            + " set clientCertificate(...) or keyManager(...)"
            + (failure.getDescription() != null
                ? " (the server ended the connection: " + failure.getDescription() + ")"
                : "");
    SSLHandshakeException cause = new SSLHandshakeException(message);
    if (failure.getCause() != null) {
      cause.initCause(failure.getCause());
    }
    return Status.UNAVAILABLE.withDescription(message).withCause(cause);
  }

  @Override
  public String chooseEngineClientAlias(String[] keyType, Principal[] issuers, SSLEngine engine) {
    requested = true;
    return null;
  }

  @Override
  public String chooseClientAlias(String[] keyType, Principal[] issuers, Socket socket) {
    requested = true;
    return null;
  }

  @Override
  public String[] getClientAliases(String keyType, Principal[] issuers) {
    return null;
  }

  @Override
  public String[] getServerAliases(String keyType, Principal[] issuers) {
    return null;
  }

  @Override
  public String chooseServerAlias(String keyType, Principal[] issuers, Socket socket) {
    return null;
  }

  @Override
  public X509Certificate[] getCertificateChain(String alias) {
    return null;
  }

  @Override
  public PrivateKey getPrivateKey(String alias) {
    return null;
  }
}
