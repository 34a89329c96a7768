package io.xinserve.client.errors;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusException;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/** Turns gRPC failures into the typed {@link XinserveException} hierarchy. */
public final class XinserveExceptions {
  private XinserveExceptions() {}

  /**
   * Maps any throwable from a gRPC call to a {@link XinserveException}. Wrappers ({@link
   * CompletionException}, {@link ExecutionException}) are unwrapped; an existing {@code
   * XinserveException} is returned as is; anything that carries no gRPC status becomes {@code
   * UNKNOWN}.
   *
   * @param t the failure
   * @return the typed exception, never {@code null}
   */
  public static XinserveException from(Throwable t) {
    return from(t, null);
  }

  /**
   * As {@link #from(Throwable)}, recording the call's request id in the exception.
   *
   * @param t the failure
   * @param requestId the call's {@code x-request-id}, or {@code null}
   * @return the typed exception, never {@code null}
   */
  public static XinserveException from(Throwable t, String requestId) {
    Throwable cur = t;
    while ((cur instanceof CompletionException || cur instanceof ExecutionException)
        && cur.getCause() != null) {
      cur = cur.getCause();
    }
    if (cur instanceof XinserveException xe) {
      return xe;
    }
    if (cur instanceof CancellationException) {
      return of(
          Status.CANCELLED.withDescription("cancelled by the caller").withCause(cur), null, requestId);
    }
    Status status = Status.fromThrowable(cur);
    Metadata trailers = Status.trailersFromThrowable(cur);
    return of(status, trailers, cur, requestId);
  }

  /**
   * Maps a status and its trailers (as given to a {@code ClientCall.Listener#onClose}).
   *
   * @param status the non-OK status
   * @param trailers the trailers, may be {@code null}
   * @return the typed exception
   */
  public static XinserveException of(Status status, Metadata trailers) {
    return of(status, trailers, status.asRuntimeException(trailers), null);
  }

  /**
   * As {@link #of(Status, Metadata)}, recording the call's request id in the exception.
   *
   * @param status the non-OK status
   * @param trailers the trailers, may be {@code null}
   * @param requestId the call's {@code x-request-id}, or {@code null}
   * @return the typed exception
   */
  public static XinserveException of(Status status, Metadata trailers, String requestId) {
    return of(status, trailers, status.asRuntimeException(trailers), requestId);
  }

  /**
   * As {@link #of(Status, Metadata, String)} for the end of a server stream.
   *
   * @param status the non-OK status
   * @param trailers the trailers, may be {@code null}
   * @param requestId the call's {@code x-request-id}, or {@code null}
   * @param afterMessages whether the stream delivered at least one message before it failed (then
   *     {@link XinserveException#afterMessages()} is {@code true} and the exception is not
   *     retryable)
   * @return the typed exception
   */
  public static XinserveException ofStream(
      Status status, Metadata trailers, String requestId, boolean afterMessages) {
    XinserveException e = of(status, trailers, status.asRuntimeException(trailers), requestId);
    if (afterMessages) {
      e.markAfterMessages();
    }
    return e;
  }

  private static XinserveException of(
      Status status, Metadata trailers, Throwable cause, String requestId) {
    ErrorDetails details = decode(status, trailers).withRequestId(requestId);
    Throwable c = cause;
    if (!(c instanceof StatusRuntimeException) && !(c instanceof StatusException)) {
      c = status.asRuntimeException(trailers);
    }
    Throwable tls = status.getCode() == Status.Code.UNAVAILABLE ? tlsFailure(status.getCause()) : null;
    if (tls != null) {
      String what = describeChain(tls);
      return new TlsHandshakeException(
          new ErrorDetails(
              details.code(),
              "TLS handshake failed: " + what,
              details.reason(),
              details.domain(),
              details.metadata(),
              null,
              details.fieldViolations(),
              requestId),
          c);
    }
    switch (details.code()) {
      case INVALID_ARGUMENT:
      case OUT_OF_RANGE:
        return new InvalidArgumentException(details, c);
      case NOT_FOUND:
        return new NotFoundException(details, c);
      case RESOURCE_EXHAUSTED:
        return new ResourceExhaustedException(details, c);
      case UNAVAILABLE:
        return new UnavailableException(details, c);
      case DEADLINE_EXCEEDED:
        return new DeadlineExceededException(details, c);
      case UNAUTHENTICATED:
        return new UnauthenticatedException(details, c);
      case PERMISSION_DENIED:
        return new PermissionDeniedException(details, c);
      case CANCELLED:
        return new CancelledException(details, c);
      case FAILED_PRECONDITION:
        return new FailedPreconditionException(details, c);
      default:
        return new XinserveException(details, c);
    }
  }

  /** The messages along a cause chain, each once: "General ...: PKIX path validation failed: ...". */
  private static String describeChain(Throwable t) {
    java.util.LinkedHashSet<String> parts = new java.util.LinkedHashSet<>();
    for (Throwable cur = t; cur != null; cur = cur.getCause() == cur ? null : cur.getCause()) {
      String m = cur.getMessage();
      if (m != null && !m.isBlank() && parts.stream().noneMatch(p -> p.contains(m))) {
        parts.add(m);
      }
      if (parts.size() >= 4) {
        break;
      }
    }
    return parts.isEmpty() ? t.getClass().getSimpleName() : String.join(": ", parts);
  }

  /**
   * Whether a status is a TLS handshake or certificate failure: {@code UNAVAILABLE} caused by an
   * {@link javax.net.ssl.SSLException} or a {@link java.security.cert.CertificateException}
   * anywhere in its cause chain. {@link #from} maps such a status to {@link TlsHandshakeException}.
   *
   * @param status the status
   * @return {@code true} for a TLS failure
   */
  public static boolean isTlsHandshakeFailure(Status status) {
    return status.getCode() == Status.Code.UNAVAILABLE && tlsFailure(status.getCause()) != null;
  }

  private static Throwable tlsFailure(Throwable t) {
    for (Throwable cur = t; cur != null; cur = cur.getCause() == cur ? null : cur.getCause()) {
      if (cur instanceof javax.net.ssl.SSLException
          || cur instanceof java.security.cert.CertificateException) {
        return cur;
      }
    }
    return null;
  }

  /**
   * Decodes a status and the {@code grpc-status-details-bin} trailer into {@link ErrorDetails}.
   *
   * @param status the status
   * @param trailers the trailers, may be {@code null}
   * @return the decoded details
   */
  public static ErrorDetails decode(Status status, Metadata trailers) {
    String reason = null;
    String domain = null;
    java.util.Map<String, String> md = null;
    Duration retry = null;
    List<FieldViolation> violations = new ArrayList<>();
    com.google.rpc.Status rich = null;
    try {
      rich = StatusProto.fromStatusAndTrailers(status, trailers);
    } catch (RuntimeException ignored) {
      // malformed details: keep the bare status
    }
    if (rich != null) {
      for (Any any : rich.getDetailsList()) {
        try {
          if (any.is(BadRequest.class)) {
            for (BadRequest.FieldViolation v : any.unpack(BadRequest.class).getFieldViolationsList()) {
              violations.add(new FieldViolation(v.getField(), v.getDescription(), v.getReason()));
            }
          } else if (any.is(ErrorInfo.class)) {
            ErrorInfo info = any.unpack(ErrorInfo.class);
            reason = info.getReason().isEmpty() ? null : info.getReason();
            domain = info.getDomain().isEmpty() ? null : info.getDomain();
            md = info.getMetadataMap();
          } else if (any.is(RetryInfo.class)) {
            com.google.protobuf.Duration d = any.unpack(RetryInfo.class).getRetryDelay();
            retry = Duration.ofSeconds(d.getSeconds(), d.getNanos());
          }
        } catch (InvalidProtocolBufferException ignored) {
          // skip a detail we cannot parse
        }
      }
    }
    return new ErrorDetails(
        status.getCode(), status.getDescription(), reason, domain, md, retry, violations);
  }
}
