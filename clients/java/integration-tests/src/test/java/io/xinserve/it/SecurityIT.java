package io.xinserve.it;

import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.xinserve.client.AttemptCounter;
import io.xinserve.client.RetryPolicy;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.UnauthenticatedException;
import io.xinserve.client.errors.TlsHandshakeException;
import io.xinserve.client.errors.UnavailableException;
import io.xinserve.v1.Model;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** TLS with a custom CA and mTLS from PEM, bearer tokens: accepted and refused. */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class SecurityIT {
  private final LiveServers servers = LiveServers.get();

  private XinserveClient.Builder tls(int port) {
    return XinserveClient.builder()
        .target("dns:///localhost:" + port)
        .unaryDeadline(Duration.ofSeconds(30))
        .retryPolicy(RetryPolicy.none());
  }

  @Test
  void tlsByIpAddressMatchesTheIpSan() {
    try (XinserveClient c = XinserveClient.builder()
        .address("127.0.0.1", servers.tlsPort)
        .trustCertificates(servers.pki.caCert)
        .clientCertificate(servers.pki.clientCert, servers.pki.clientKey)
        .build()) {
      assertThat(c.serverInfo().getServerVersion()).isNotEmpty();
    }
  }

  @Test
  void tlsRefusesAServerCertificateFromAnotherCaAtTheFirstAttempt() {
    AttemptCounter countAttempts = new AttemptCounter(); // one per gRPC attempt, retries included
    try (XinserveClient c = tls(servers.tlsPort)
        .retryPolicy(RetryPolicy.defaults())
        .intercept(countAttempts)
        .trustCertificates(servers.pki.otherCaCert)
        .clientCertificate(servers.pki.clientCert, servers.pki.clientKey)
        .build()) {
      // a trust failure is its own, non-retryable exception naming the TLS failure
      assertThatThrownBy(c::listModels)
          .isInstanceOfSatisfying(
              TlsHandshakeException.class,
              e -> {
                assertThat(e.isRetryable()).isFalse();
                assertThat(e.getMessage()).contains("TLS handshake failed");
              });
      // and gRPC's retry policy (3 attempts for UNAVAILABLE) does not try it again
      assertThat(countAttempts.attempts()).isEqualTo(1);
    }
  }

  @Test
  void mutualTlsWithACustomCaAndAClientCertificateFromPem() {
    try (XinserveClient c = tls(servers.tlsPort)
        .trustCertificates(servers.pki.caCert)
        .clientCertificate(servers.pki.clientCert, servers.pki.clientKey)
        .build()) {
      assertThat(c.listModels()).extracting(Model::getName).contains(TINY);
      assertThat(c.generate(ClientIT.greedy("mtls", 4)).getOutputsCount()).isEqualTo(1);
    }
  }

  @Test
  void mutualTlsListenerRefusesAClientWithoutCertificateAtTheFirstAttempt() {
    AttemptCounter countAttempts = new AttemptCounter();
    try (XinserveClient c = tls(servers.tlsPort)
        .retryPolicy(RetryPolicy.defaults())
        .intercept(countAttempts)
        .trustCertificates(servers.pki.caCert)
        .build()) {
      // the server (gRPC C-core) closes the connection without a TLS alert after the handshake
      assertThatThrownBy(c::listModels)
          .isInstanceOfSatisfying(
              TlsHandshakeException.class,
              e -> {
                assertThat(e).isNotInstanceOf(UnavailableException.class);
                assertThat(e.isRetryable()).isFalse();
                assertThat(e.getMessage())
                    .contains("requires a client certificate")
                    .contains("clientCertificate(");
              });
      assertThat(countAttempts.attempts()).isEqualTo(1);
    }
  }

  @Test
  void bearerTokenAccepted() {
    try (XinserveClient c = servers.anonymousClient().bearerToken(LiveServers.TOKEN).build()) {
      assertThat(c.listModels()).extracting(Model::getName).contains(TINY);
      assertThat(c.generate(ClientIT.greedy("token", 4)).getOutputsCount()).isEqualTo(1);
    }
  }

  @Test
  void missingOrWrongTokenIsUnauthenticated() {
    try (XinserveClient none = servers.anonymousClient().build()) {
      assertThatThrownBy(none::listModels).isInstanceOf(UnauthenticatedException.class);
      assertThatThrownBy(() -> none.generate(ClientIT.greedy("x", 4)))
          .isInstanceOf(UnauthenticatedException.class);
    }
    try (XinserveClient wrong = servers.anonymousClient().bearerToken("not-the-token").build()) {
      assertThatThrownBy(wrong::listModels).isInstanceOf(UnauthenticatedException.class);
    }
  }

  @Test
  void refreshedTokenIsUsedOnTheNextCall() {
    AtomicReference<String> current = new AtomicReference<>("stale-token");
    try (XinserveClient c = servers.anonymousClient().bearerToken(current::get).build()) {
      assertThatThrownBy(c::listModels).isInstanceOf(UnauthenticatedException.class);
      current.set(LiveServers.TOKEN);
      assertThat(c.listModels()).isNotEmpty();
    }
  }
}
