package io.xinserve.client;

import java.util.Map;

/**
 * What an {@link EvidenceVerifier} vouches for.
 *
 * @param tee the KBS TEE name ({@code tdx}, {@code snp}, {@code cca}, {@code csv}, {@code sample})
 * @param reportData the 64 report-data bytes inside the evidence
 * @param recorded true when the evidence was replayed from a file (proves nothing about hardware)
 * @param claims verifier-specific claims (measurements, TCB), as strings
 */
public record VerifiedEvidence(String tee, byte[] reportData, boolean recorded, Map<String, String> claims) {
  /** Defensive copies. */
  public VerifiedEvidence {
    reportData = reportData.clone();
    claims = Map.copyOf(claims);
  }

  @Override
  public byte[] reportData() {
    return reportData.clone();
  }
}
