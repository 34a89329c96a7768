package io.xinserve.client;

/**
 * Checks TEE evidence (signatures, certificate chains, TCB level) and returns the report data
 * inside it. Implementations are the deployer's: Intel DCAP / Trust Authority for TDX, AMD KDS for
 * SEV-SNP, Hygon's for CSV, or a remote attestation service (Trustee's). {@link
 * RecordedEvidenceVerifier} is the test and demo one.
 */
@FunctionalInterface
public interface EvidenceVerifier {
  /**
   * @param attestation the server's answer (TEE name, evidence, auxiliary evidence)
   * @return what the evidence proves, its 64 report-data bytes included
   * @throws AttestationException when the evidence does not verify
   */
  VerifiedEvidence verify(ChannelAttestation attestation);
}
