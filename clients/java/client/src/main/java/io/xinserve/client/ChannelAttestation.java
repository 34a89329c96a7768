package io.xinserve.client;

import com.google.protobuf.ByteString;
import io.grpc.ClientInterceptors;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCalls;
import io.xinserve.client.errors.XinserveExceptions;
import io.xinserve.v1.AttestationServiceGrpc;
import io.xinserve.v1.GetAttestationRequest;
import io.xinserve.v1.GetAttestationResponse;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * A TEE attestation bound to the TLS connection it was asked on ({@code
 * xinserve.v1.AttestationService/GetAttestation}): the server's evidence, whose report data is
 * {@link ChannelBinding#reportData} of the client's nonce, the server certificate's SPKI and the
 * served models' manifest digests.
 *
 * <pre>{@code
 * ChannelAttestation att = ChannelAttestation.attestation(client);
 * VerifiedEvidence v = att.verify(myVerifier, List.of("sm3:…"));   // evidence + channel + models
 * }</pre>
 *
 * <p>{@link #binds} checks the report data against a certificate: the one the client saw on the
 * very connection the attestation came over ({@link #peerCertificate()}, read from the call's TLS
 * session) or one it pinned. The evidence itself (TDX quote, SNP report, CSV report…) is checked
 * by an {@link EvidenceVerifier}: a hardware verifier (Intel DCAP, AMD KDS, Hygon, an attestation
 * service) is the deployer's; {@link RecordedEvidenceVerifier} accepts only replayed evidence, for
 * tests and demos.
 */
public final class ChannelAttestation {
  /** Size of the nonce {@link #attestation(XinserveClient)} draws, in bytes. */
  public static final int NONCE_SIZE = 32;

  private static final SecureRandom RANDOM = new SecureRandom();

  private final byte[] nonce;
  private final GetAttestationResponse response;
  private final X509Certificate peerCertificate;

  ChannelAttestation(byte[] nonce, GetAttestationResponse response, X509Certificate peerCertificate) {
    this.nonce = nonce.clone();
    this.response = Objects.requireNonNull(response, "response");
    this.peerCertificate = peerCertificate;
  }

  /**
   * Asks the server for an attestation over 32 fresh random bytes.
   *
   * @param client a client of a TLS listener
   * @return the attestation and the certificate of the connection it came over
   * @see #attestation(XinserveClient, byte[])
   */
  public static ChannelAttestation attestation(XinserveClient client) {
    byte[] nonce = new byte[NONCE_SIZE];
    RANDOM.nextBytes(nonce);
    return attestation(client, nonce);
  }

  /**
   * Calls {@code GetAttestation} on the client's channel (its deadline, bearer token and
   * interceptors) and records the server certificate of the TLS session the call ran on.
   *
   * @param client a client of a TLS listener
   * @param nonce a fresh nonce, 16 to 64 bytes
   * @return the attestation
   * @throws io.xinserve.client.errors.FailedPreconditionException the server has no TEE, or the
   *     channel is not TLS
   * @throws io.xinserve.client.errors.InvalidArgumentException the nonce is outside 16..64 bytes
   * @throws io.xinserve.client.errors.XinserveException any other gRPC failure, typed by status
   */
  public static ChannelAttestation attestation(XinserveClient client, byte[] nonce) {
    Objects.requireNonNull(client, "client");
    Objects.requireNonNull(nonce, "nonce");
    PeerCertificateCapture capture = new PeerCertificateCapture();
    String rid = Calls.requestIdOrNew("");
    GetAttestationRequest request =
        GetAttestationRequest.newBuilder().setNonce(ByteString.copyFrom(nonce)).build();
    GetAttestationResponse response;
    try {
      response =
          ClientCalls.blockingUnaryCall(
              ClientInterceptors.intercept(client.channel(), capture),
              AttestationServiceGrpc.getGetAttestationMethod(),
              client.calls().unaryOptions(rid),
              request);
    } catch (StatusRuntimeException e) {
      throw XinserveExceptions.from(e, rid);
    }
    return new ChannelAttestation(nonce, response, capture.certificate());
  }

  /** @return a copy of the nonce the attestation was asked with */
  public byte[] nonce() {
    return nonce.clone();
  }

  /** @return the KBS TEE name of the evidence: {@code tdx}, {@code snp}, {@code cca}, {@code csv}, {@code sample} */
  public String tee() {
    return response.getTee();
  }

  /** @return the evidence as the server's provider produced it (quote, report, token or JSON) */
  public byte[] evidence() {
    return response.getEvidence().toByteArray();
  }

  /** @return auxiliary evidence (the SNP certificate table), empty if none */
  public byte[] auxEvidence() {
    return response.getAuxEvidence().toByteArray();
  }

  /** @return the 64 report-data bytes the server says its evidence binds */
  public byte[] reportData() {
    return response.getReportData().toByteArray();
  }

  /** @return the SHA-256 of the SPKI of the certificate the server says it presents */
  public byte[] spkiSha256() {
    return response.getSpkiSha256().toByteArray();
  }

  /** @return the manifest digests ({@code sm3:<hex>}) of the served models */
  public List<String> manifestDigests() {
    return List.copyOf(response.getManifestDigestsList());
  }

  /** @return true when the evidence is replayed from a file: it proves nothing about hardware */
  public boolean recorded() {
    return response.getRecorded();
  }

  /** @return the raw answer */
  public GetAttestationResponse response() {
    return response;
  }

  /**
   * @return the server's leaf certificate of the TLS session the attestation came over; empty for
   *     a plaintext or in-process channel
   */
  public Optional<X509Certificate> peerCertificate() {
    return Optional.ofNullable(peerCertificate);
  }

  /**
   * Whether the report data binds this nonce, {@code certificate} and the listed manifest
   * digests. That the evidence itself carries {@link #reportData()} is the {@link
   * EvidenceVerifier}'s check ({@link #verify} does both).
   *
   * @param certificate the server certificate the client trusts for this endpoint
   * @return true if it binds; false for another certificate, nonce or model set, or a malformed
   *     answer
   */
  public boolean binds(X509Certificate certificate) {
    return binds(certificate, null);
  }

  /**
   * @param certificate the server certificate the client trusts for this endpoint
   * @param expectedModels the manifest digests the client expects served (any order), or null to
   *     accept the listed ones
   * @return true when {@link #binds(X509Certificate)} holds and, if given, the server lists exactly
   *     {@code expectedModels}
   */
  public boolean binds(X509Certificate certificate, Collection<String> expectedModels) {
    if (certificate == null) {
      return false;
    }
    List<String> listed = manifestDigests();
    if (expectedModels != null) {
      List<String> a = new ArrayList<>(expectedModels);
      List<String> b = new ArrayList<>(listed);
      a.sort(null);
      b.sort(null);
      if (!a.equals(b)) {
        return false;
      }
    }
    try {
      byte[] spki = ChannelBinding.spkiSha256(certificate);
      byte[] expected = ChannelBinding.reportData(nonce, spki, listed);
      return MessageDigest.isEqual(spki, spkiSha256()) && MessageDigest.isEqual(expected, reportData());
    } catch (IllegalArgumentException e) {
      return false;
    }
  }

  /**
   * {@link #binds(X509Certificate)} for the certificate of the connection the attestation came
   * over.
   *
   * @return false over plaintext or in-process channels (nothing to bind to)
   */
  public boolean bindsChannel() {
    return binds(peerCertificate, null);
  }

  /**
   * Both checks: the verifier accepts the evidence (and finds this report data in it), and the
   * report data binds the connection's certificate, the nonce and {@code expectedModels}.
   *
   * @param verifier checks the evidence
   * @param expectedModels the manifest digests the client expects served, or null for any
   * @return what the verifier vouches for
   * @throws AttestationException if the evidence does not verify or does not bind this channel
   */
  public VerifiedEvidence verify(EvidenceVerifier verifier, Collection<String> expectedModels) {
    Objects.requireNonNull(verifier, "verifier");
    VerifiedEvidence verified = verifier.verify(this);
    if (!MessageDigest.isEqual(verified.reportData(), reportData())
        || !binds(peerCertificate, expectedModels)) {
      throw new AttestationException(
          "the attestation does not bind this TLS certificate, nonce and models");
    }
    return verified;
  }
}
