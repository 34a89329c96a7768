package io.xinserve.spring.boot;

import static org.assertj.core.api.Assertions.assertThat;

import io.grpc.Server;
import io.grpc.TlsServerCredentials;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.services.HealthStatusManager;
import io.grpc.testing.TlsTesting;
import io.xinserve.client.RetryPolicy;
import io.xinserve.client.XinserveClient;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.Status;

/**
 * The first health check of a client whose server cannot be reached over real sockets: a port
 * nobody listens on, and a real TLS server (Netty, grpc-java's test certificates) whose
 * certificate the client does not trust. Both are DOWN at once, and the detail {@code error} tells
 * them apart.
 */
@Timeout(60)
class UnreachableServerHealthTest {
  private static final Duration DEADLINE = Duration.ofSeconds(20);

  @Test
  void aRefusingPortIsDownAtTheFirstCheckWithTheError() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      port = s.getLocalPort();
    }
    try (XinserveClient c =
        XinserveClient.builder()
            .address("127.0.0.1", port)
            .plaintext()
            .retryPolicy(RetryPolicy.none())
            .build()) {
      Health h = new XinserveHealthIndicator(c, "", DEADLINE).health();
      assertThat(h.getStatus()).isEqualTo(Status.DOWN);
      assertThat(h.getDetails()).containsEntry("code", "UNAVAILABLE");
      assertThat((String) h.getDetails().get("error"))
          .startsWith("io.xinserve.client.errors.UnavailableException: UNAVAILABLE");
    }
  }

  @Test
  void aServerCertificateOfAnotherCaIsDownAtTheFirstCheckNamingTheTlsFailure() throws Exception {
    HealthStatusManager health = new HealthStatusManager();
    Server server =
        NettyServerBuilder.forAddress(
                new InetSocketAddress(InetAddress.getLoopbackAddress(), 0),
                TlsServerCredentials.create(
                    TlsTesting.loadCert("server1.pem"), TlsTesting.loadCert("server1.key")))
            .addService(health.getHealthService())
            .build()
            .start();
    try (InputStream otherCa = TlsTesting.loadCert("badserver.pem");
        XinserveClient c =
            XinserveClient.builder()
                .address("127.0.0.1", server.getPort())
                .overrideAuthority("foo.test.google.fr")
                .trustCertificates(otherCa.readAllBytes())
                .build()) {
      Health h = new XinserveHealthIndicator(c, "", DEADLINE).health();
      assertThat(h.getStatus()).isEqualTo(Status.DOWN);
      assertThat((String) h.getDetails().get("error"))
          .startsWith("io.xinserve.client.errors.TlsHandshakeException: ")
          .contains("PKIX path building failed");
    } finally {
      server.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
  }
}
