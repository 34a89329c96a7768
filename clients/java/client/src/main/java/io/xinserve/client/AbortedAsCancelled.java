package io.xinserve.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.xinserve.v1.ChatResponse;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.CompletionOutput;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import java.util.List;

/**
 * Turns a generation the server ended with {@code FINISH_REASON_CANCELLED} (an {@code Abort} by
 * request id, or the server cancelling it while draining) into a failed call with status {@code
 * CANCELLED}, so that an aborted call never looks like a complete answer: unary calls throw {@link
 * io.xinserve.client.errors.CancelledException} instead of returning the truncated text; streams
 * deliver the deltas received up to the abort (the last one carries the finish reason) and then
 * fail with the same exception.
 */
final class AbortedAsCancelled implements ClientInterceptor {
  static final String DESCRIPTION = "aborted: the server ended the generation with finish_reason CANCELLED";

  @Override
  public <Q, R> ClientCall<Q, R> interceptCall(
      MethodDescriptor<Q, R> method, CallOptions callOptions, Channel next) {
    return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, callOptions)) {
      @Override
      public void start(Listener<R> responseListener, Metadata headers) {
        super.start(
            new ForwardingClientCallListener.SimpleForwardingClientCallListener<>(responseListener) {
              private boolean aborted;

              @Override
              public void onMessage(R message) {
                if (cancelled(message)) {
                  aborted = true;
                }
                super.onMessage(message);
              }

              @Override
              public void onClose(Status status, Metadata trailers) {
                if (status.isOk() && aborted) {
                  super.onClose(Status.CANCELLED.withDescription(DESCRIPTION), trailers);
                } else {
                  super.onClose(status, trailers);
                }
              }
            },
            headers);
      }
    };
  }

  static boolean cancelled(Object message) {
    if (message instanceof GenerateStreamResponse m) {
      return m.getFinishReason() == FinishReason.FINISH_REASON_CANCELLED;
    }
    if (message instanceof ChatStreamResponse m) {
      return m.getFinishReason() == FinishReason.FINISH_REASON_CANCELLED;
    }
    if (message instanceof GenerateResponse m) {
      return anyCancelled(m.getOutputsList());
    }
    if (message instanceof ChatResponse m) {
      return anyCancelled(m.getOutputsList());
    }
    return false;
  }

  private static boolean anyCancelled(List<CompletionOutput> outputs) {
    for (CompletionOutput o : outputs) {
      if (o.getFinishReason() == FinishReason.FINISH_REASON_CANCELLED) {
        return true;
      }
    }
    return false;
  }
}
