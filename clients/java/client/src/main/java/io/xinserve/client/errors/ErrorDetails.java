package io.xinserve.client.errors;

import io.grpc.Status;
import java.time.Duration;
import java.util.List;
import java.util.Map;

/**
 * What a failed call's status said, decoded from the gRPC status and its {@code google.rpc}
 * details ({@code BadRequest}, {@code ErrorInfo}, {@code RetryInfo}).
 *
 * @param code the gRPC status code
 * @param message the status description, never {@code null} (may be empty)
 * @param reason {@code ErrorInfo.reason}, or {@code null}
 * @param domain {@code ErrorInfo.domain}, or {@code null}
 * @param metadata {@code ErrorInfo.metadata}, never {@code null}
 * @param retryDelay {@code RetryInfo.retry_delay}, or {@code null}
 * @param fieldViolations {@code BadRequest.field_violations}, never {@code null}
 */
public record ErrorDetails(
    Status.Code code,
    String message,
    String reason,
    String domain,
    Map<String, String> metadata,
    Duration retryDelay,
    List<FieldViolation> fieldViolations) {

  /** Normalises {@code null}s to empty values. */
  public ErrorDetails {
    message = message == null ? "" : message;
    metadata = metadata == null ? Map.of() : Map.copyOf(metadata);
    fieldViolations = fieldViolations == null ? List.of() : List.copyOf(fieldViolations);
  }
}
