package io.xinserve.it;

import io.xinserve.client.RetryPolicy;
import io.xinserve.client.XinserveClient;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;

/**
 * The live server every IT shares, started once per test JVM (so once per Maven run) and stopped
 * with SIGTERM when the JUnit run ends ({@link XinserveServerExtension}), or at JVM exit.
 *
 * <p>One server keeps start-up and memory small on a 2-core machine (each server loads two vLLM
 * engines): {@code --auth-required} with a token file, a plaintext loopback listener (bearer
 * tokens), a TLS listener that requires a client certificate (mTLS; its subject is the
 * principal), and a plaintext loopback OpenAI-compatible HTTP listener (same bearer tokens). TLS
 * server verification with the test CA is exercised on the TLS listener. Its TEE provider is
 * {@code recorded} (Trustee's recorded TDX quote, tests/fixtures/tee), so that AttestationService
 * answers on the TLS listener.
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
  final XinserveServer server;
  final int tlsPort;
  /** the OpenAI-compatible HTTP listener's port ({@code http://127.0.0.1:<port>/v1}) */
  final int httpPort;

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
    Files.setPosixFilePermissions(tokens, PosixFilePermissions.fromString("rw-------")); // the server refuses a group/world-readable token file

    Path repoRoot = Path.of(System.getProperty("xinserve.repo.root", "../../..")).toAbsolutePath().normalize();
    Path teeConfig = work.resolve("tee.yaml");
    Files.writeString(teeConfig, "tee:\n  provider: recorded\n  allow_recorded: true\n"
        + "  recorded_evidence_file: '" + repoRoot.resolve("tests/fixtures/tee/tdx_quote_4.dat") + "'\n",
        StandardCharsets.UTF_8);

    int port = XinserveServer.freePort();
    tlsPort = XinserveServer.freePort();
    httpPort = XinserveServer.freePort();
    XinserveServer started = XinserveServer.start("xinserve", work, port, List.of(
        "--tls-listen", "127.0.0.1:" + tlsPort,
        "--tls-cert", pki.serverCert.toString(), "--tls-key", pki.serverKey.toString(),
        "--tls-client-ca", pki.caCert.toString(),
        "--http-listen", "127.0.0.1:" + httpPort,
        "--token-file", tokens.toString(), "--auth-required", "--config", teeConfig.toString(),
        "--builtin-model", TINY, "--builtin-model", MINILM));
    try (XinserveClient probe = plainClient(port).bearerToken(TOKEN).build()) {
      started.awaitServing(probe);
    } catch (Exception | Error e) {
      started.close();
      throw e;
    }
    server = started;
  }

  static XinserveClient.Builder plainClient(int port) {
    return XinserveClient.builder()
        .target("dns:///127.0.0.1:" + port)
        .plaintext()
        .retryPolicy(RetryPolicy.defaults())
        .unaryDeadline(Duration.ofSeconds(60));
  }

  /** @return a client of the plaintext listener, with the valid bearer token */
  XinserveClient.Builder plainClient() {
    return plainClient(server.port).bearerToken(TOKEN);
  }

  /** @return a builder aimed at the plaintext listener without credentials */
  XinserveClient.Builder anonymousClient() {
    return plainClient(server.port);
  }

  static String sha256(String s) throws NoSuchAlgorithmException {
    return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8)));
  }

  @Override
  public synchronized void close() throws Exception {
    if (server != null) {
      server.close();
    }
  }

}
