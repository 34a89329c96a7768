package io.xinserve.spring.ai;

import io.xinserve.client.errors.XinserveException;
import io.xinserve.client.errors.XinserveExceptions;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.retry.TransientAiException;

/**
 * Maps xinserve failures onto Spring AI's two exception kinds, keeping the typed {@link
 * XinserveException} (status code, field violations, request id) as the cause: retryable ones
 * (UNAVAILABLE, RESOURCE_EXHAUSTED, or with a RetryInfo) become {@link TransientAiException},
 * everything else {@link NonTransientAiException}.
 */
final class XinserveAiErrors {
  private XinserveAiErrors() {}

  static RuntimeException map(Throwable t) {
    if (t instanceof TransientAiException || t instanceof NonTransientAiException) {
      return (RuntimeException) t;
    }
    if (!(t instanceof XinserveException) && t instanceof RuntimeException r && !isGrpc(t)) {
      return r;
    }
    XinserveException e = XinserveExceptions.from(t);
    String message =
        "xinserve call failed: "
            + e.getMessage()
            + e.requestId().map(id -> " (request id " + id + ")").orElse("");
    return e.isRetryable()
        ? new TransientAiException(message, e)
        : new NonTransientAiException(message, e);
  }

  private static boolean isGrpc(Throwable t) {
    return t instanceof io.grpc.StatusRuntimeException || t instanceof io.grpc.StatusException;
  }
}
