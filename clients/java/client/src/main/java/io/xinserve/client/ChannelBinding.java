package io.xinserve.client;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.cert.CertificateEncodingException;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HexFormat;
import java.util.List;
import org.bouncycastle.asn1.x509.Certificate;
import org.bouncycastle.crypto.digests.SM3Digest;

/**
 * The report data of a channel-bound attestation ({@code xinserve.v1.AttestationService/
 * GetAttestation}, proto/xinserve/v1/attestation.proto):
 *
 * <pre>
 * SM3(u32be(len(nonce)) ‖ nonce ‖ SHA-256(certificate SubjectPublicKeyInfo DER) ‖ u32be(n) ‖ d_1 ‖ … ‖ d_n)
 * </pre>
 *
 * zero-padded to 64 bytes, where {@code d_i} are the served models' SM3 manifest digests ({@code
 * "sm3:<64 hex>"}, 32 bytes each) in ascending unsigned byte order. SM3 (GB/T 32905) is
 * BouncyCastle's {@link SM3Digest}; the SPKI is read from the certificate's own DER (BouncyCastle
 * ASN.1), not re-encoded. The server ({@code trust/tee/binding.py}) and the Python client compute
 * the same; all three are tested against tests/fixtures/tee/channel_binding_vectors.json.
 */
public final class ChannelBinding {
  /** Report data size of TDX, SEV-SNP, CSV and CCA evidence, in bytes. */
  public static final int REPORT_DATA_SIZE = 64;
  /** Smallest nonce the server accepts, in bytes. */
  public static final int MIN_NONCE = 16;
  /** Largest nonce the server accepts, in bytes. */
  public static final int MAX_NONCE = 64;

  /** The Maven coordinates of the optional dependency that provides SM3. */
  static final String BOUNCYCASTLE = "org.bouncycastle:bcprov-jdk18on";

  private ChannelBinding() {}

  /**
   * BouncyCastle is an optional dependency of the client: only the channel binding needs it.
   *
   * @throws IllegalStateException naming the dependency when it is not on the class path
   */
  private static void requireBouncyCastle() {
    try {
      Class.forName(
          "org.bouncycastle.crypto.digests.SM3Digest", false, ChannelBinding.class.getClassLoader());
    } catch (ClassNotFoundException | LinkageError e) {
      throw new IllegalStateException(
          "the attestation channel binding needs SM3 (GB/T 32905) from BouncyCastle, which is not"
              + " on the class path: add the dependency "
              + BOUNCYCASTLE
              + " (1.87 or later)",
          e);
    }
  }

  /**
   * @param certificate an X.509 certificate
   * @return the 32-byte SHA-256 of its SubjectPublicKeyInfo DER
   * @throws IllegalArgumentException if the certificate cannot be encoded or parsed
   * @throws IllegalStateException if BouncyCastle ({@code org.bouncycastle:bcprov-jdk18on}, an
   *     optional dependency) is not on the class path
   */
  public static byte[] spkiSha256(X509Certificate certificate) {
    requireBouncyCastle();
    try {
      byte[] spki =
          Certificate.getInstance(certificate.getEncoded()).getSubjectPublicKeyInfo().getEncoded("DER");
      return MessageDigest.getInstance("SHA-256").digest(spki);
    } catch (CertificateEncodingException | java.io.IOException | IllegalArgumentException e) {
      throw new IllegalArgumentException("the certificate's SubjectPublicKeyInfo cannot be read", e);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is missing from this JVM", e);
    }
  }

  /**
   * @param nonce the client's nonce, 16 to 64 bytes
   * @param spkiSha256 the 32-byte SHA-256 of the server certificate's SPKI
   * @param manifestDigests the served models' digests, {@code "sm3:<64 hex>"}, in any order
   * @return the 64 report-data bytes the evidence must bind
   * @throws IllegalArgumentException for a nonce outside 16..64 bytes, an SPKI hash that is not 32
   *     bytes or a digest that is not {@code sm3:} and 64 hex characters
   * @throws IllegalStateException if BouncyCastle ({@code org.bouncycastle:bcprov-jdk18on}, an
   *     optional dependency) is not on the class path
   */
  public static byte[] reportData(byte[] nonce, byte[] spkiSha256, Collection<String> manifestDigests) {
    requireBouncyCastle();
    if (nonce == null || nonce.length < MIN_NONCE || nonce.length > MAX_NONCE) {
      throw new IllegalArgumentException("nonce must be " + MIN_NONCE + " to " + MAX_NONCE + " bytes");
    }
    if (spkiSha256 == null || spkiSha256.length != 32) {
      throw new IllegalArgumentException("the SPKI hash is a 32-byte SHA-256");
    }
    List<byte[]> digests = new ArrayList<>();
    for (String d : manifestDigests) {
      digests.add(digestBytes(d));
    }
    digests.sort(Arrays::compareUnsigned);
    ByteArrayOutputStream message = new ByteArrayOutputStream();
    message.writeBytes(ByteBuffer.allocate(4).putInt(nonce.length).array());
    message.writeBytes(nonce);
    message.writeBytes(spkiSha256);
    message.writeBytes(ByteBuffer.allocate(4).putInt(digests.size()).array());
    digests.forEach(message::writeBytes);
    byte[] m = message.toByteArray();
    SM3Digest sm3 = new SM3Digest();
    sm3.update(m, 0, m.length);
    byte[] out = new byte[REPORT_DATA_SIZE];
    sm3.doFinal(out, 0);
    return out;
  }

  static byte[] digestBytes(String manifestDigest) {
    if (manifestDigest == null
        || !manifestDigest.startsWith("sm3:")
        || manifestDigest.length() != 4 + 64) {
      throw new IllegalArgumentException("a manifest digest is 'sm3:' and 64 hex characters");
    }
    try {
      return HexFormat.of().parseHex(manifestDigest, 4, manifestDigest.length());
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("a manifest digest is 'sm3:' and 64 hex characters", e);
    }
  }
}
