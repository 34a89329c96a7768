package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.google.protobuf.ByteString;
import io.grpc.Grpc;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.TlsServerCredentials;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import io.grpc.testing.TlsTesting;
import io.xinserve.client.errors.FailedPreconditionException;
import io.xinserve.v1.AttestationServiceGrpc;
import io.xinserve.v1.GetAttestationRequest;
import io.xinserve.v1.GetAttestationResponse;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * {@link ChannelAttestation} over real TLS (grpc-java's Netty transport on loopback, grpc-testing's
 * test certificates) and over the in-process transport (no TLS session), against an
 * AttestationService that answers like the server's recorded provider.
 */
class ChannelAttestationTest {
  static final List<String> DIGESTS = List.of("sm3:" + "ab".repeat(32), "sm3:" + "01".repeat(32));
  static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private Server server;
  private XinserveClient client;
  private final LinkedBlockingQueue<Metadata> headers = new LinkedBlockingQueue<>();

  @AfterEach
  void stop() throws InterruptedException {
    if (client != null) {
      client.close();
    }
    if (server != null) {
      server.shutdownNow();
      server.awaitTermination(10, TimeUnit.SECONDS);
    }
  }

  static X509Certificate cert(String name) throws Exception {
    try (InputStream in = TlsTesting.loadCert(name)) {
      return (X509Certificate) CertificateFactory.getInstance("X.509").generateCertificate(in);
    }
  }

  /** Answers like the server: report data over the nonce, {@code bound}'s SPKI and DIGESTS. */
  static final class Service extends AttestationServiceGrpc.AttestationServiceImplBase {
    final X509Certificate bound;
    final Status refuse;

    Service(X509Certificate bound, Status refuse) {
      this.bound = bound;
      this.refuse = refuse;
    }

    @Override
    public void getAttestation(GetAttestationRequest request, StreamObserver<GetAttestationResponse> out) {
      if (refuse != null) {
        out.onError(refuse.asRuntimeException());
        return;
      }
      byte[] spki = ChannelBinding.spkiSha256(bound);
      byte[] rd = ChannelBinding.reportData(request.getNonce().toByteArray(), spki, DIGESTS);
      String evidence =
          "{\"svn\":\"1\",\"report_data\":\"" + Base64.getEncoder().encodeToString(rd)
              + "\",\"recorded\":true,\"source\":\"unit-test\",\"recorded_evidence\":\"\"}";
      out.onNext(
          GetAttestationResponse.newBuilder()
              .setTee("sample")
              .setRecorded(true)
              .setEvidence(ByteString.copyFrom(evidence, StandardCharsets.UTF_8))
              .setReportData(ByteString.copyFrom(rd))
              .setSpkiSha256(ByteString.copyFrom(spki))
              .addAllManifestDigests(DIGESTS)
              .build());
      out.onCompleted();
    }
  }

  private ServerInterceptor recordHeaders() {
    return new ServerInterceptor() {
      @Override
      public <Q, R> ServerCall.Listener<Q> interceptCall(
          ServerCall<Q, R> call, Metadata md, ServerCallHandler<Q, R> next) {
        headers.add(md);
        return next.startCall(call, md);
      }
    };
  }

  private XinserveClient tlsClient(Service service) throws Exception {
    try (InputStream chain = TlsTesting.loadCert("server1.pem");
        InputStream key = TlsTesting.loadCert("server1.key")) {
      server =
          Grpc.newServerBuilderForPort(0, TlsServerCredentials.create(chain, key))
              .addService(ServerInterceptors.intercept(service, recordHeaders()))
              .build()
              .start();
    }
    byte[] ca;
    try (InputStream in = TlsTesting.loadCert("ca.pem")) {
      ca = in.readAllBytes();
    }
    client =
        XinserveClient.builder()
            .target("127.0.0.1:" + server.getPort())
            .trustCertificates(ca)
            .overrideAuthority("foo.test.google.fr") // a name in server1.pem
            .bearerToken("unit-token")
            .build();
    return client;
  }

  @Test
  void overTlsTheAnswerBindsTheConnectionsCertificate() throws Exception {
    X509Certificate server1 = cert("server1.pem");
    ChannelAttestation att = ChannelAttestation.attestation(tlsClient(new Service(server1, null)));

    assertThat(att.peerCertificate()).contains(server1);
    assertThat(att.bindsChannel()).isTrue();
    assertThat(att.binds(server1, DIGESTS)).isTrue();
    assertThat(att.binds(cert("badserver.pem"))).as("another certificate").isFalse();
    assertThat(att.nonce()).hasSize(ChannelAttestation.NONCE_SIZE);
    VerifiedEvidence v = att.verify(new RecordedEvidenceVerifier(), DIGESTS);
    assertThat(v.recorded()).isTrue();
    assertThat(v.reportData()).isEqualTo(att.reportData());
    assertThat(v.claims()).containsEntry("source", "unit-test");
    assertThatThrownBy(() -> att.verify(new RecordedEvidenceVerifier(), List.of(DIGESTS.get(0))))
        .isInstanceOf(AttestationException.class)
        .hasMessageContaining("does not bind");
    // the call carried the client's credentials like every other call
    assertThat(headers.poll(10, TimeUnit.SECONDS).get(AUTHORIZATION)).isEqualTo("Bearer unit-token");
  }

  @Test
  void evidenceBoundToAnotherEndpointDoesNotBindThisConnection() throws Exception {
    // a relay answering with evidence bound to the certificate of the server behind it
    X509Certificate elsewhere = cert("badserver.pem");
    ChannelAttestation att = ChannelAttestation.attestation(tlsClient(new Service(elsewhere, null)));

    assertThat(att.peerCertificate()).contains(cert("server1.pem"));
    assertThat(att.bindsChannel()).isFalse();
    assertThat(att.binds(elsewhere)).isTrue();
    assertThatThrownBy(() -> att.verify(new RecordedEvidenceVerifier(), null))
        .isInstanceOf(AttestationException.class);
  }

  @Test
  void inProcessHasNoTlsSessionToBindTo() throws Exception {
    String name = InProcessServerBuilder.generateName();
    X509Certificate server1 = cert("server1.pem");
    server = InProcessServerBuilder.forName(name).addService(new Service(server1, null)).build().start();
    client = XinserveClient.builder().channelBuilder(InProcessChannelBuilder.forName(name)).build();
    byte[] nonce = new byte[16];
    ChannelAttestation att = ChannelAttestation.attestation(client, nonce);

    assertThat(att.peerCertificate()).isEmpty();
    assertThat(att.bindsChannel()).isFalse();
    assertThat(att.binds(server1)).as("a pinned certificate still binds").isTrue();
    assertThat(att.nonce()).isEqualTo(nonce);
    assertThatThrownBy(() -> att.verify(new RecordedEvidenceVerifier(), null))
        .isInstanceOf(AttestationException.class);
  }

  @Test
  void serverRefusalsAreTyped() throws Exception {
    String name = InProcessServerBuilder.generateName();
    Status noTee = Status.FAILED_PRECONDITION.withDescription("the server runs without a TEE");
    server = InProcessServerBuilder.forName(name).addService(new Service(null, noTee)).build().start();
    client = XinserveClient.builder().channelBuilder(InProcessChannelBuilder.forName(name)).build();

    assertThatThrownBy(() -> ChannelAttestation.attestation(client))
        .isInstanceOf(FailedPreconditionException.class)
        .hasMessageContaining("without a TEE");
  }

  private static ChannelAttestation answer(String tee, boolean recorded, String evidence, byte[] rd) {
    return new ChannelAttestation(
        new byte[16],
        GetAttestationResponse.newBuilder()
            .setTee(tee)
            .setRecorded(recorded)
            .setEvidence(ByteString.copyFrom(evidence, StandardCharsets.UTF_8))
            .setReportData(ByteString.copyFrom(rd))
            .build(),
        null);
  }

  @Test
  void recordedVerifierRefusesEverythingButRecordedSampleEvidence() {
    byte[] rd = new byte[64];
    rd[0] = 7;
    String good = "{\"report_data\":\"" + Base64.getEncoder().encodeToString(rd) + "\",\"recorded\":true}";
    RecordedEvidenceVerifier verifier = new RecordedEvidenceVerifier();
    assertThat(verifier.verify(answer("sample", true, good, rd)).reportData()).isEqualTo(rd);

    assertThatThrownBy(() -> verifier.verify(answer("tdx", false, good, rd)))
        .isInstanceOf(AttestationException.class).hasMessageContaining("'tdx' hardware");
    assertThatThrownBy(() -> verifier.verify(answer("sample", false, good, rd)))
        .isInstanceOf(AttestationException.class);
    assertThatThrownBy(() -> verifier.verify(answer("sample", true, "[1,2", rd)))
        .isInstanceOf(AttestationException.class).hasMessageContaining("not a JSON object");
    assertThatThrownBy(() -> verifier.verify(answer("sample", true, good.replace("true", "false"), rd)))
        .isInstanceOf(AttestationException.class).hasMessageContaining("not marked recorded");
    assertThatThrownBy(
            () -> verifier.verify(answer("sample", true, "{\"report_data\":\"!!\",\"recorded\":true}", rd)))
        .isInstanceOf(AttestationException.class).hasMessageContaining("64 bytes");
    assertThatThrownBy(() -> verifier.verify(answer("sample", true, good, new byte[64])))
        .isInstanceOf(AttestationException.class).hasMessageContaining("differs");
  }
}
