package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.grpc.Server;
import io.grpc.TlsServerCredentials;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import io.grpc.testing.TlsTesting;
import io.xinserve.client.errors.TlsHandshakeException;
import io.xinserve.client.errors.UnavailableException;
import io.xinserve.v1.GetServerInfoRequest;
import io.xinserve.v1.GetServerInfoResponse;
import io.xinserve.v1.ServerServiceGrpc;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A real TLS gRPC server (Netty, grpc-java's test certificates) behind a TCP relay that counts the
 * connections the client opens; the client counts its call attempts ({@link AttemptCounter}). A
 * certificate the client does not trust must fail the call once, with its own exception, instead
 * of being retried as a plain UNAVAILABLE. (The accepted connections are only checked to be at least
 * one: the channel itself reconnects in the background after its reconnect backoff, at a time no
 * test can fix.)
 */
@Timeout(120)
class TlsHandshakeFailureTest {
  @TempDir Path tempDir;
  private Server server;
  private CountingRelay relay;

  @BeforeEach
  void startServer() throws Exception {
    server =
        NettyServerBuilder.forAddress(
                new InetSocketAddress(InetAddress.getLoopbackAddress(), 0),
                TlsServerCredentials.create(
                    TlsTesting.loadCert("server1.pem"), TlsTesting.loadCert("server1.key")))
            .addService(
                new ServerServiceGrpc.ServerServiceImplBase() {
                  @Override
                  public void getServerInfo(
                      GetServerInfoRequest request, StreamObserver<GetServerInfoResponse> out) {
                    out.onNext(GetServerInfoResponse.newBuilder().setServerVersion("tls").build());
                    out.onCompleted();
                  }
                })
            .build()
            .start();
    relay = new CountingRelay(server.getPort());
  }

  @AfterEach
  void stopServer() throws Exception {
    if (relay != null) {
      relay.close();
    }
    if (server != null) {
      server.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
  }

  private XinserveClient.Builder client(AttemptCounter counter, String trustedCert)
      throws IOException {
    try (InputStream ca = TlsTesting.loadCert(trustedCert)) {
      return XinserveClient.builder()
          .address("127.0.0.1", relay.port())
          // the test certificate names *.test.google.fr; its CA is grpc-java's test CA
          .overrideAuthority("foo.test.google.fr")
          .trustCertificates(ca.readAllBytes())
          .retryPolicy(RetryPolicy.defaults())
          .unaryDeadline(Duration.ofSeconds(60))
          .intercept(counter);
    }
  }

  @Test
  void aServerCertificateFromAnotherCaFailsOnceAsTlsHandshakeException() throws Exception {
    AttemptCounter counter = new AttemptCounter();
    // badserver.pem is a self-signed certificate: a CA that did not sign the server's certificate
    try (XinserveClient c = client(counter, "badserver.pem").build()) {
      assertThatThrownBy(c::serverInfo)
          .isInstanceOfSatisfying(
              TlsHandshakeException.class,
              e -> {
                assertThat(e).isNotInstanceOf(UnavailableException.class);
                assertThat(e.isRetryable()).isFalse();
                assertThat(e.getMessage()).contains("TLS handshake failed").contains("PKIX");
              });
      // RetryPolicy.defaults() would make 3 attempts of a retryable UNAVAILABLE
      assertThat(counter.attempts()).isEqualTo(1);
      assertThat(relay.accepted()).isGreaterThanOrEqualTo(1);
    }
  }

  @Test
  void aRetryableUnavailableIsStillRetried() throws Exception {
    // nothing listens on the relay's port once it is closed: connection refused, not TLS
    relay.close();
    AttemptCounter counter = new AttemptCounter();
    try (XinserveClient c = client(counter, "ca.pem").build()) {
      assertThatThrownBy(c::serverInfo).isInstanceOf(UnavailableException.class);
      assertThat(counter.attempts()).isEqualTo(RetryPolicy.defaults().maxAttempts());
    }
  }

  @Test
  void theTrustedCaConnectsThroughTheSameServerAndRelay() throws Exception {
    AttemptCounter counter = new AttemptCounter();
    try (XinserveClient c = client(counter, "ca.pem").build()) {
      assertThat(c.serverInfo().getServerVersion()).isEqualTo("tls");
      assertThat(counter.attempts()).isEqualTo(1);
      assertThat(relay.accepted()).isEqualTo(1);
    }
  }

  /** A real mTLS server: grpc-java's test CA signs the client certificates it accepts. */
  private static Server mutualTlsServer() throws IOException {
    try (InputStream cert = TlsTesting.loadCert("server1.pem");
        InputStream key = TlsTesting.loadCert("server1.key");
        InputStream ca = TlsTesting.loadCert("ca.pem")) {
      return NettyServerBuilder.forAddress(
              new InetSocketAddress(InetAddress.getLoopbackAddress(), 0),
              TlsServerCredentials.newBuilder()
                  .keyManager(cert, key)
                  .trustManager(ca)
                  .clientAuth(TlsServerCredentials.ClientAuth.REQUIRE)
                  .build())
          .addService(
              new ServerServiceGrpc.ServerServiceImplBase() {
                @Override
                public void getServerInfo(
                    GetServerInfoRequest request, StreamObserver<GetServerInfoResponse> out) {
                  out.onNext(GetServerInfoResponse.newBuilder().setServerVersion("mtls").build());
                  out.onCompleted();
                }
              })
          .build()
          .start();
    }
  }

  @Test
  void anMtlsServerRefusingAClientWithoutCertificateFailsOnceNamingTheMissingCertificate()
      throws Exception {
    Server mtls = mutualTlsServer();
    try {
      AttemptCounter counter = new AttemptCounter();
      try (InputStream ca = TlsTesting.loadCert("ca.pem");
          XinserveClient c =
              XinserveClient.builder()
                  .address("127.0.0.1", mtls.getPort())
                  .overrideAuthority("foo.test.google.fr")
                  .trustCertificates(ca.readAllBytes())
                  .retryPolicy(RetryPolicy.defaults())
                  .unaryDeadline(Duration.ofSeconds(60))
                  .intercept(counter)
                  .build()) {
        assertThatThrownBy(c::serverInfo)
            .isInstanceOfSatisfying(
                TlsHandshakeException.class,
                e -> {
                  assertThat(e.isRetryable()).isFalse();
                  assertThat(e.getMessage())
                      .contains("TLS handshake failed")
                      .contains("client certificate");
                });
        assertThat(counter.attempts()).isEqualTo(1);
      }
      // the same server accepts the client once it presents a certificate of the trusted CA
      Path cert = tempDir.resolve("client.pem");
      Path key = tempDir.resolve("client.key");
      try (InputStream in = TlsTesting.loadCert("client.pem")) {
        Files.copy(in, cert);
      }
      try (InputStream in = TlsTesting.loadCert("client.key")) {
        Files.copy(in, key);
      }
      try (InputStream ca = TlsTesting.loadCert("ca.pem");
          XinserveClient c =
              XinserveClient.builder()
                  .address("127.0.0.1", mtls.getPort())
                  .overrideAuthority("foo.test.google.fr")
                  .trustCertificates(ca.readAllBytes())
                  .clientCertificate(cert, key)
                  .build()) {
        assertThat(c.serverInfo().getServerVersion()).isEqualTo("mtls");
      }
    } finally {
      mtls.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
  }

  /** A loopback TCP relay to the server that counts accepted connections. */
  static final class CountingRelay implements AutoCloseable {
    private final ServerSocket listener;
    private final int target;
    private final AtomicInteger accepted = new AtomicInteger();
    private final List<Socket> sockets = new ArrayList<>();
    private final Thread acceptor;

    CountingRelay(int target) throws IOException {
      this.target = target;
      this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
      this.acceptor = new Thread(this::acceptLoop, "tls-test-relay");
      acceptor.setDaemon(true);
      acceptor.start();
    }

    int port() {
      return listener.getLocalPort();
    }

    int accepted() {
      return accepted.get();
    }

    private void acceptLoop() {
      while (!listener.isClosed()) {
        try {
          Socket in = listener.accept();
          accepted.incrementAndGet();
          Socket out = new Socket(InetAddress.getLoopbackAddress(), target);
          synchronized (sockets) {
            sockets.add(in);
            sockets.add(out);
          }
          pipe(in, out);
          pipe(out, in);
        } catch (IOException e) {
          return; // closed
        }
      }
    }

    private void pipe(Socket from, Socket to) {
      Thread t =
          new Thread(
              () -> {
                try (InputStream i = from.getInputStream();
                    OutputStream o = to.getOutputStream()) {
                  i.transferTo(o);
                } catch (IOException ignored) {
                  // one side closed
                } finally {
                  closeQuietly(from);
                  closeQuietly(to);
                }
              },
              "tls-test-relay-pipe");
      t.setDaemon(true);
      t.start();
    }

    private static void closeQuietly(Socket s) {
      try {
        s.close();
      } catch (IOException ignored) {
        // already closed
      }
    }

    @Override
    public void close() throws Exception {
      listener.close();
      acceptor.join(10_000);
      synchronized (sockets) {
        sockets.forEach(CountingRelay::closeQuietly);
      }
    }
  }
}
