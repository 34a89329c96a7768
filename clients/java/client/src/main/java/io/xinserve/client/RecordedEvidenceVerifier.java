package io.xinserve.client;

import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import com.google.protobuf.util.JsonFormat;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Base64;
import java.util.Map;

/**
 * Accepts only the evidence of xinserve's {@code recorded} provider (TEE {@code sample}, marked
 * recorded): the JSON object {@code {"svn", "report_data": <base64 of 64 bytes>, "recorded":
 * true, "source", "recorded_evidence"}}. It proves nothing about hardware and exists for tests
 * and demos; hardware evidence is refused.
 */
public final class RecordedEvidenceVerifier implements EvidenceVerifier {
  /** Larger evidence is refused before parsing, in bytes. */
  static final int MAX_EVIDENCE = 1 << 21;

  @Override
  public VerifiedEvidence verify(ChannelAttestation attestation) {
    if (!"sample".equals(attestation.tee()) || !attestation.recorded()) {
      throw new AttestationException(
          "the recorded verifier cannot verify '" + truncate(attestation.tee()) + "' hardware evidence");
    }
    byte[] evidence = attestation.evidence();
    if (evidence.length > MAX_EVIDENCE) {
      throw new AttestationException("recorded evidence is larger than " + MAX_EVIDENCE + " bytes");
    }
    Struct.Builder doc = Struct.newBuilder();
    try {
      JsonFormat.parser().merge(new String(evidence, StandardCharsets.UTF_8), doc);
    } catch (InvalidProtocolBufferException | RuntimeException e) {
      throw new AttestationException("recorded evidence is not a JSON object");
    }
    Map<String, Value> fields = doc.getFieldsMap();
    Value marker = fields.get("recorded");
    Value reportData = fields.get("report_data");
    if (marker == null || !marker.hasBoolValue() || !marker.getBoolValue()) {
      throw new AttestationException("recorded evidence is not marked recorded");
    }
    byte[] data;
    try {
      data =
          reportData != null && reportData.hasStringValue()
              ? Base64.getDecoder().decode(reportData.getStringValue())
              : null;
    } catch (IllegalArgumentException e) {
      data = null;
    }
    if (data == null || data.length != ChannelBinding.REPORT_DATA_SIZE) {
      throw new AttestationException("recorded evidence has no base64 report_data of 64 bytes");
    }
    if (!MessageDigest.isEqual(data, attestation.reportData())) {
      throw new AttestationException("the evidence's report data differs from the answer's");
    }
    Value source = fields.get("source");
    return new VerifiedEvidence(
        "sample",
        data,
        true,
        Map.of("source", source != null && source.hasStringValue() ? source.getStringValue() : ""));
  }

  private static String truncate(String s) {
    return s.length() <= 20 ? s : s.substring(0, 20) + "…";
  }
}
