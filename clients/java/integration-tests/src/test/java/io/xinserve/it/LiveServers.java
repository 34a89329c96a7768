package io.xinserve.it;

import io.xinserve.client.RetryPolicy;
import io.xinserve.client.XinserveClient;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;

/**
 * The two live servers every IT shares, started once per test JVM (so once per Maven run) and
 * stopped with SIGTERM when the JUnit run ends ({@link XinserveServerExtension}), or at JVM exit.
 *
 * <ul>
 *   <li>{@code plain}: a plaintext listener and a TLS listener (server authentication only), no
 *       authentication required;
 *   <li>{@code secure}: {@code --auth-required} with a token file; a plaintext loopback listener
 *       (bearer tokens) and a TLS listener that requires a client certificate (mTLS).
 * </ul>
 *
 * Both load the embedded default models. Starting them in parallel halves the wait.
 */
final class LiveServers implements AutoCloseable {
  static final String TINY = "xinserve-tiny-llama";
  static final String MINILM = "all-MiniLM-L6-v2";
  static final String TOKEN = "it-token-0123456789abcdef";
  static final String PRINCIPAL = "it-user";

  private static LiveServers instance;
  private static IllegalStateException failure;

  final Path work;
  final TestPki pki;
  final XinserveServer plain;
  final int plainTlsPort;
  final XinserveServer secure;
  final int secureTlsPort;

  static synchronized LiveServers get() {
    if (failure != null) {
      throw failure; // one failed start-up fails every IT at once instead of retrying per class
    }
    if (instance == null) {
      try {
        instance = new LiveServers();
      } catch (Exception | Error e) {
        failure = new IllegalStateException("could not start the live xinserve servers: " + e.getMessage(), e);
        throw failure;
      }
      LiveServers started = instance;
      Runtime.getRuntime().addShutdownHook(new Thread(() -> {
        try {
          started.close();
        } catch (Exception ignored) {
          // best effort at JVM exit
        }
      }, "xinserve-it-servers-stop"));
    }
    return instance;
  }

  static synchronized void stopIfStarted() throws Exception {
    if (instance != null) {
      instance.close();
    }
  }

  private LiveServers() throws Exception {
    work = Path.of(System.getProperty("xinserve.it.work", "target/it")).toAbsolutePath();
    Files.createDirectories(work);
    pki = new TestPki(work.resolve("pki"));
    Path tokens = work.resolve("tokens.txt");
    Files.writeString(tokens, "# principal sha256(token) roles\n" + PRINCIPAL + " " + sha256(TOKEN) + " user\n",
        StandardCharsets.UTF_8);

    int plainPort = XinserveServer.freePort();
    plainTlsPort = XinserveServer.freePort();
    int securePort = XinserveServer.freePort();
    secureTlsPort = XinserveServer.freePort();

    XinserveServer p = null;
    XinserveServer s = null;
    try {
      p = XinserveServer.start("plain", work, plainPort, List.of(
          "--tls-listen", "127.0.0.1:" + plainTlsPort,
          "--tls-cert", pki.serverCert.toString(), "--tls-key", pki.serverKey.toString()));
      s = XinserveServer.start("secure", work, securePort, List.of(
          "--tls-listen", "127.0.0.1:" + secureTlsPort,
          "--tls-cert", pki.serverCert.toString(), "--tls-key", pki.serverKey.toString(),
          "--tls-client-ca", pki.caCert.toString(),
          "--token-file", tokens.toString(), "--auth-required"));
      try (XinserveClient probe = plainClient(p.port).build()) {
        p.awaitServing(probe);
      }
      try (XinserveClient probe = plainClient(s.port).bearerToken(TOKEN).build()) {
        s.awaitServing(probe);
      }
    } catch (Exception | Error e) {
      if (p != null) {
        p.close();
      }
      if (s != null) {
        s.close();
      }
      throw e;
    }
    plain = p;
    secure = s;
  }

  static XinserveClient.Builder plainClient(int port) {
    return XinserveClient.builder()
        .target("dns:///127.0.0.1:" + port)
        .plaintext()
        .retryPolicy(RetryPolicy.defaults())
        .unaryDeadline(Duration.ofSeconds(60));
  }

  /** @return a client of the plain server's plaintext listener */
  XinserveClient.Builder plainClient() {
    return plainClient(plain.port);
  }

  /** @return a builder aimed at the secure server's plaintext listener (no credentials yet) */
  XinserveClient.Builder secureClient() {
    return plainClient(secure.port);
  }

  static String sha256(String s) throws NoSuchAlgorithmException {
    return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8)));
  }

  @Override
  public synchronized void close() throws Exception {
    try {
      if (plain != null) {
        plain.close();
      }
    } finally {
      if (secure != null) {
        secure.close();
      }
    }
  }

}
