package io.xinserve.it;

import static org.assertj.core.api.Assertions.assertThat;

import io.xinserve.spring.boot.XinserveClientAutoConfiguration;
import io.xinserve.spring.boot.XinserveHealthAutoConfiguration;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthIndicator;
import org.springframework.boot.actuate.health.Status;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.ssl.SslAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * The starter's health contributor, configured only through properties, at its first check after
 * start-up: against the live server's mTLS listener with a trust store of another CA, with the
 * right CA but no client certificate, and against a port nobody listens on. Each is DOWN at once,
 * and the {@code error} detail says which of the three it is.
 */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class StarterHealthIT {
  private final LiveServers servers = LiveServers.get();
  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(
              AutoConfigurations.of(
                  SslAutoConfiguration.class,
                  XinserveClientAutoConfiguration.class,
                  XinserveHealthAutoConfiguration.class))
          .withPropertyValues("xinserve.client.health.timeout=20s");

  private Health firstCheck(String... properties) {
    Health[] h = new Health[1];
    runner
        .withPropertyValues(properties)
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed();
              h[0] = ctx.getBean("xinserveHealthContributor", HealthIndicator.class).health();
            });
    return h[0];
  }

  @Test
  void aTrustStoreOfAnotherCaIsDownNamingThePkixFailure() {
    Health h =
        firstCheck(
            "spring.ssl.bundle.pem.other.truststore.certificate=file:" + servers.pki.otherCaCert,
            "spring.ssl.bundle.pem.other.keystore.certificate=file:" + servers.pki.clientCert,
            "spring.ssl.bundle.pem.other.keystore.private-key=file:" + servers.pki.clientKey,
            "xinserve.client.address=dns:///localhost:" + servers.tlsPort,
            "xinserve.client.ssl.bundle=other");
    assertThat(h.getStatus()).isEqualTo(Status.DOWN);
    assertThat((String) h.getDetails().get("error"))
        .startsWith("io.xinserve.client.errors.TlsHandshakeException: ")
        .contains("PKIX path building failed");
  }

  @Test
  void noClientCertificateForTheMtlsListenerIsDownNamingTheMissingCertificate() {
    Health h =
        firstCheck(
            "spring.ssl.bundle.pem.ca-only.truststore.certificate=file:" + servers.pki.caCert,
            "xinserve.client.address=dns:///localhost:" + servers.tlsPort,
            "xinserve.client.ssl.bundle=ca-only");
    assertThat(h.getStatus()).isEqualTo(Status.DOWN);
    assertThat((String) h.getDetails().get("error"))
        .startsWith("io.xinserve.client.errors.TlsHandshakeException: ")
        .contains("client certificate");
  }

  @Test
  void aRefusingPortIsDownAsUnavailable() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      port = s.getLocalPort();
    }
    Health h =
        firstCheck(
            "xinserve.client.address=dns:///127.0.0.1:" + port, "xinserve.client.plaintext=true");
    assertThat(h.getStatus()).isEqualTo(Status.DOWN);
    assertThat(h.getDetails()).containsEntry("code", "UNAVAILABLE");
    assertThat((String) h.getDetails().get("error"))
        .startsWith("io.xinserve.client.errors.UnavailableException: ");
  }
}
