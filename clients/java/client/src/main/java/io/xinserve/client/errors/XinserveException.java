package io.xinserve.client.errors;

import com.google.protobuf.Descriptors.EnumValueDescriptor;
import io.grpc.Status;
import io.xinserve.v1.ErrorReason;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;

/**
 * Base of every exception the xinserve client throws for a failed call.
 *
 * <p>Each instance carries the gRPC {@link Status.Code}, the server's (sanitised) description and
 * whatever {@code google.rpc} details the server attached: an {@code ErrorInfo} reason and domain,
 * and a {@code RetryInfo} delay. {@link #errorReason()} reads the reason as the contract's {@link
 * ErrorReason} ({@code proto/xinserve/v1/errors.proto}). Subclasses exist for the codes a caller usually handles
 * differently; any other code is thrown as a plain {@code XinserveException}.
 *
 * <p>Unchecked, so it can cross lambdas and reactive operators.
 */
public class XinserveException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** {@code ErrorInfo.domain} of the reasons an xinserve server sends. */
  public static final String DOMAIN = "xinserve.io";

  private static final String REASON_PREFIX = "ERROR_REASON_";

  private final transient Status.Code code;
  private final String reason;
  private final String domain;
  private final transient Map<String, String> errorMetadata;
  private final transient Duration retryDelay;
  private final String requestId;
  private boolean afterMessages;

  /**
   * Creates an exception from its parts; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the status code, message and details of the failed call
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public XinserveException(ErrorDetails details, Throwable cause) {
    super(details.code() + (details.message().isEmpty() ? "" : ": " + details.message()), cause);
    this.code = details.code();
    this.reason = details.reason();
    this.domain = details.domain();
    this.errorMetadata = details.metadata();
    this.retryDelay = details.retryDelay();
    this.requestId = details.requestId();
  }

  /**
   * @return the call's {@code x-request-id} (the request's {@code request_id}, or the id the client
   *     generated), under which the server's audit log recorded the call; empty if the failure
   *     happened outside a call
   */
  public Optional<String> requestId() {
    return Optional.ofNullable(requestId);
  }

  /** @return the gRPC status code of the failed call */
  public Status.Code code() {
    return code;
  }

  /** @return {@code ErrorInfo.reason} sent by the server (e.g. {@code "MODEL_NOT_FOUND"}), if any */
  public Optional<String> reason() {
    return Optional.ofNullable(reason);
  }

  /**
   * The reason as a value of the contract's {@link ErrorReason}: on the wire the reason is the
   * value's name without {@code ERROR_REASON_} ({@code "MODEL_NOT_FOUND"} is {@link
   * ErrorReason#ERROR_REASON_MODEL_NOT_FOUND}).
   *
   * @return the reason's enum value; empty if the server sent no {@code ErrorInfo}, one of
   *     another domain than {@value #DOMAIN}, or a reason this client's contract does not list (a
   *     newer server: {@link #reason()} still holds its name)
   */
  public Optional<ErrorReason> errorReason() {
    if (reason == null || !DOMAIN.equals(domain)) {
      return Optional.empty();
    }
    EnumValueDescriptor value = ErrorReason.getDescriptor().findValueByName(REASON_PREFIX + reason);
    if (value == null || value.getNumber() == ErrorReason.ERROR_REASON_UNSPECIFIED_VALUE) {
      return Optional.empty();
    }
    return Optional.of(ErrorReason.valueOf(value));
  }

  /** @return {@code ErrorInfo.domain} sent by the server, if any */
  public Optional<String> domain() {
    return Optional.ofNullable(domain);
  }

  /** @return {@code ErrorInfo.metadata} sent by the server; empty if none */
  public Map<String, String> errorMetadata() {
    return errorMetadata == null ? Map.of() : errorMetadata;
  }

  /**
   * @return how long the server asks the caller to wait before trying again ({@code
   *     google.rpc.RetryInfo}), if it said
   */
  public Optional<Duration> retryDelay() {
    return Optional.ofNullable(retryDelay);
  }

  /**
   * @return {@code true} if the failed call was a stream that had already delivered at least one
   *     message (a partial result: the generation was cut off mid-way); {@code false} for a unary
   *     call or a stream that failed before its first message
   */
  public boolean afterMessages() {
    return afterMessages;
  }

  void markAfterMessages() {
    afterMessages = true;
  }

  /**
   * @return {@code true} if trying the same call again later may succeed (UNAVAILABLE,
   *     RESOURCE_EXHAUSTED, or any status that came with a RetryInfo) and it delivered nothing yet;
   *     {@code false} once a stream delivered a message ({@link #afterMessages()}), because a
   *     new call would generate the delivered part again
   */
  public boolean isRetryable() {
    return !afterMessages
        && (retryDelay != null
            || code == Status.Code.UNAVAILABLE
            || code == Status.Code.RESOURCE_EXHAUSTED);
  }
}
