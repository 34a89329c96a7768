package io.xinserve.it;

import static io.xinserve.it.LiveServers.MINILM;
import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.xinserve.client.AttestationException;
import io.xinserve.client.ChannelAttestation;
import io.xinserve.client.RecordedEvidenceVerifier;
import io.xinserve.client.RetryPolicy;
import io.xinserve.client.VerifiedEvidence;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.FailedPreconditionException;
import io.xinserve.client.errors.InvalidArgumentException;
import io.xinserve.v1.Model;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The Java SDK's channel-bound attestation against the live Python server (recorded TEE provider,
 * see {@link LiveServers}) over its real mTLS listener: the report data binds the certificate of the
 * very connection and the served models' manifest digests, and not a different certificate.
 */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AttestationIT {
  private final LiveServers servers = LiveServers.get();

  private XinserveClient tlsClient() {
    return XinserveClient.builder()
        .target("dns:///localhost:" + servers.tlsPort)
        .trustCertificates(servers.pki.caCert)
        .clientCertificate(servers.pki.clientCert, servers.pki.clientKey)
        .unaryDeadline(Duration.ofSeconds(60))
        .retryPolicy(RetryPolicy.defaults())
        .build();
  }

  private static X509Certificate load(Path pem) throws Exception {
    try (InputStream in = Files.newInputStream(pem)) {
      return (X509Certificate) CertificateFactory.getInstance("X.509").generateCertificate(in);
    }
  }

  @Test
  void bindsTheTlsChannelItCameOverAndTheServedModels() throws Exception {
    try (XinserveClient client = tlsClient()) {
      List<String> served =
          client.listModels().stream().map(Model::getManifestDigest).filter(d -> !d.isEmpty()).toList();
      assertThat(client.listModels()).extracting(Model::getName).contains(TINY, MINILM);
      assertThat(served).as("the built-in models are signed").hasSize(2);

      assertThat(client.serverInfo().getTee().getTee()).as("GetServerInfo names the TEE").isEqualTo("sample");
      assertThat(client.serverInfo().getTee().getRecorded()).isTrue();
      assertThat(client.serverInfo().getTee().getKeysFromKbs()).isFalse();

      ChannelAttestation att = ChannelAttestation.attestation(client);

      assertThat(att.tee()).isEqualTo("sample");
      assertThat(att.recorded()).isTrue();
      X509Certificate serverCert = load(servers.pki.serverCert);
      assertThat(att.peerCertificate()).contains(serverCert);
      assertThat(att.bindsChannel()).isTrue();
      assertThat(att.binds(serverCert, served)).as("the pinned server certificate").isTrue();
      assertThat(att.binds(load(servers.pki.clientCert))).as("a different certificate").isFalse();
      assertThat(att.binds(load(servers.pki.otherCaCert))).as("another CA's certificate").isFalse();
      assertThat(att.binds(serverCert, List.of(served.get(0)))).as("not the models served").isFalse();

      VerifiedEvidence v = att.verify(new RecordedEvidenceVerifier(), served);
      assertThat(v.reportData()).isEqualTo(att.reportData());
      assertThat(v.claims()).containsEntry("source", "tdx_quote_4.dat");

      ChannelAttestation again = ChannelAttestation.attestation(client);
      assertThat(again.reportData()).as("a fresh nonce, fresh report data").isNotEqualTo(att.reportData());
      assertThat(again.bindsChannel()).isTrue();
    }
  }

  @Test
  void aClientThatExpectsAnotherModelFailsVerification() {
    try (XinserveClient client = tlsClient()) {
      ChannelAttestation att = ChannelAttestation.attestation(client);
      assertThatThrownBy(() -> att.verify(new RecordedEvidenceVerifier(), List.of("sm3:" + "00".repeat(32))))
          .isInstanceOf(AttestationException.class);
    }
  }

  @Test
  void refusedOverPlaintextAndForAShortNonce() {
    try (XinserveClient plain = servers.plainClient().build()) {
      assertThatThrownBy(() -> ChannelAttestation.attestation(plain))
          .isInstanceOf(FailedPreconditionException.class)
          .hasMessageContaining("TLS");
    }
    try (XinserveClient client = tlsClient()) {
      assertThatThrownBy(() -> ChannelAttestation.attestation(client, new byte[8]))
          .isInstanceOf(InvalidArgumentException.class);
    }
  }
}
