package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.google.protobuf.ByteString;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import com.google.protobuf.util.JsonFormat;
import io.xinserve.v1.GetAttestationResponse;
import java.io.ByteArrayInputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The Java channel binding against the vectors the server (trust/tee/binding.py) and the Python
 * client are tested against: tests/fixtures/tee/channel_binding_vectors.json in the repository.
 */
class ChannelBindingVectorsTest {
  static final Path VECTORS =
      Path.of(System.getProperty("xinserve.repo.root", "../../.."))
          .resolve("tests/fixtures/tee/channel_binding_vectors.json");
  static final HexFormat HEX = HexFormat.of();

  static Struct doc() throws Exception {
    Struct.Builder b = Struct.newBuilder();
    JsonFormat.parser().merge(Files.readString(VECTORS, StandardCharsets.UTF_8), b);
    return b.build();
  }

  static Map<String, X509Certificate> certificates() throws Exception {
    CertificateFactory cf = CertificateFactory.getInstance("X.509");
    Map<String, X509Certificate> out = new LinkedHashMap<>();
    for (Map.Entry<String, Value> e : doc().getFieldsOrThrow("certificates").getStructValue().getFieldsMap().entrySet()) {
      out.put(e.getKey(), (X509Certificate) cf.generateCertificate(
          new ByteArrayInputStream(e.getValue().getStringValue().getBytes(StandardCharsets.US_ASCII))));
    }
    return out;
  }

  static Stream<Struct> vectors() throws Exception {
    return doc().getFieldsOrThrow("vectors").getListValue().getValuesList().stream().map(Value::getStructValue);
  }

  static String str(Struct v, String key) {
    return v.getFieldsOrThrow(key).getStringValue();
  }

  static List<String> digests(Struct v) {
    return v.getFieldsOrThrow("manifest_digests").getListValue().getValuesList().stream()
        .map(Value::getStringValue).toList();
  }

  @Test
  void theVectorFileIsThere() throws Exception {
    assertThat(VECTORS).as("run from clients/java/client or set -Dxinserve.repo.root").exists();
    assertThat(vectors().count()).isGreaterThanOrEqualTo(3);
    assertThat(certificates()).containsKeys("server", "other");
  }

  @ParameterizedTest
  @MethodSource("vectors")
  void spkiHashAndReportDataMatchTheVector(Struct v) throws Exception {
    X509Certificate cert = certificates().get(str(v, "certificate"));
    byte[] spki = ChannelBinding.spkiSha256(cert);
    assertThat(HEX.formatHex(spki)).isEqualTo(str(v, "spki_sha256"));
    byte[] rd = ChannelBinding.reportData(HEX.parseHex(str(v, "nonce")), spki, digests(v));
    assertThat(HEX.formatHex(rd)).isEqualTo(str(v, "report_data"));
  }

  @ParameterizedTest
  @MethodSource("vectors")
  void bindsOnlyTheVectorsCertificate(Struct v) throws Exception {
    GetAttestationResponse response =
        GetAttestationResponse.newBuilder()
            .setTee("sample")
            .setRecorded(true)
            .setReportData(ByteString.copyFrom(HEX.parseHex(str(v, "report_data"))))
            .setSpkiSha256(ByteString.copyFrom(HEX.parseHex(str(v, "spki_sha256"))))
            .addAllManifestDigests(digests(v))
            .build();
    byte[] nonce = HEX.parseHex(str(v, "nonce"));
    ChannelAttestation att = new ChannelAttestation(nonce, response, null);
    for (Map.Entry<String, X509Certificate> e : certificates().entrySet()) {
      assertThat(att.binds(e.getValue())).as(e.getKey()).isEqualTo(e.getKey().equals(str(v, "certificate")));
    }
    nonce[0] ^= 1;
    X509Certificate own = certificates().get(str(v, "certificate"));
    assertThat(new ChannelAttestation(nonce, response, null).binds(own)).as("another nonce").isFalse();
    assertThat(att.binds(own, List.of("sm3:" + "cd".repeat(32)))).as("other models expected").isFalse();
    List<String> reversed = new java.util.ArrayList<>(digests(v));
    java.util.Collections.reverse(reversed);
    assertThat(att.binds(own, reversed)).as("same models, any order").isTrue();
    assertThat(att.bindsChannel()).as("no TLS session recorded").isFalse();
  }

  @Test
  void sm3IsSm3() {
    // GB/T 32905-2016 appendix A.1: SM3("abc"), with the digest ChannelBinding uses
    org.bouncycastle.crypto.digests.SM3Digest d = new org.bouncycastle.crypto.digests.SM3Digest();
    byte[] abc = "abc".getBytes(StandardCharsets.US_ASCII);
    d.update(abc, 0, 3);
    byte[] out = new byte[32];
    d.doFinal(out, 0);
    assertThat(HEX.formatHex(out)).isEqualTo("66c7f0f462eeedd9d1f2d46bdc10e4e24167c4875cf2f7a2297da02b8f4ba8e0");
  }

  @Test
  void refusesMalformedInput() {
    byte[] spki = new byte[32];
    assertThatThrownBy(() -> ChannelBinding.reportData(new byte[15], spki, List.of()))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("16 to 64");
    assertThatThrownBy(() -> ChannelBinding.reportData(new byte[65], spki, List.of()))
        .isInstanceOf(IllegalArgumentException.class);
    assertThatThrownBy(() -> ChannelBinding.reportData(new byte[16], new byte[31], List.of()))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("32-byte");
    for (String bad : List.of("sha256:" + "00".repeat(32), "sm3:" + "0".repeat(63), "sm3:" + "zz".repeat(32))) {
      assertThatThrownBy(() -> ChannelBinding.reportData(new byte[16], spki, List.of(bad)))
          .as(bad).isInstanceOf(IllegalArgumentException.class).hasMessageContaining("sm3:");
    }
  }
}
