package io.xinserve.client;

import com.google.common.util.concurrent.MoreExecutors;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.StreamObserver;
import io.xinserve.client.errors.XinserveExceptions;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The call plumbing of a {@link XinserveClient}: deadlines, the {@code x-request-id} and bearer
 * token of each call, failures mapped to {@link io.xinserve.client.errors.XinserveException}
 * subclasses ({@link XinserveExceptions}), and the four call forms (blocking, future, iterator,
 * listener). Immutable; {@link #withDeadline} makes a copy.
 */
final class Calls {
  private final Channel channel;
  private final Duration unaryDeadline;
  private final Duration streamDeadline;
  private final int streamPrefetch;
  private final ClientHeaders.Bearer bearer;
  private final Duration streamIdleTimeout;

  /**
   * @param channel the intercepted channel calls go through
   * @param unaryDeadline the deadline of unary calls; zero or negative for none
   * @param streamDeadline the deadline of streams; zero or negative for none
   * @param streamPrefetch messages a {@link ResponseStream} requests ahead (1..1024)
   * @param bearer the call credentials, or {@code null} for none
   * @param streamIdleTimeout the idle limit of a {@link ResponseStream}; zero for none
   */
  Calls(
      Channel channel,
      Duration unaryDeadline,
      Duration streamDeadline,
      int streamPrefetch,
      ClientHeaders.Bearer bearer,
      Duration streamIdleTimeout) {
    this.channel = channel;
    this.unaryDeadline = unaryDeadline;
    this.streamDeadline = streamDeadline;
    this.streamPrefetch = streamPrefetch;
    this.bearer = bearer;
    this.streamIdleTimeout = streamIdleTimeout;
  }

  /**
   * @param deadline the deadline of every call (unary and streams)
   * @return a copy with that deadline
   */
  Calls withDeadline(Duration deadline) {
    return new Calls(channel, deadline, deadline, streamPrefetch, bearer, streamIdleTimeout);
  }

  Channel channel() {
    return channel;
  }

  static String requestIdOrNew(String requestId) {
    return requestId == null || requestId.isEmpty() ? ClientHeaders.newRequestId() : requestId;
  }

  CallOptions options(Duration deadline, String requestId) {
    CallOptions o = CallOptions.DEFAULT;
    if (deadline != null && !deadline.isZero() && !deadline.isNegative()) {
      o = o.withDeadlineAfter(deadline.toNanos(), TimeUnit.NANOSECONDS);
    }
    if (requestId != null && !requestId.isEmpty()) {
      o = o.withOption(ClientHeaders.REQUEST_ID_OPTION, requestId);
    }
    if (bearer != null) {
      o = o.withCallCredentials(bearer);
    }
    return o;
  }

  CallOptions unaryOptions(String requestId) {
    return options(unaryDeadline, requestId);
  }

  CallOptions streamOptions(String requestId) {
    return options(streamDeadline, requestId);
  }

  <Q, R> ClientCall<Q, R> newStreamCall(MethodDescriptor<Q, R> method, String requestId) {
    return channel.newCall(method, streamOptions(requestId));
  }

  <Q, R> R blocking(MethodDescriptor<Q, R> method, Q request, String requestId) {
    String rid = requestIdOrNew(requestId);
    try {
      return ClientCalls.blockingUnaryCall(channel, method, unaryOptions(rid), request);
    } catch (StatusRuntimeException e) {
      throw XinserveExceptions.from(e, rid);
    }
  }

  <Q, R> CompletableFuture<R> async(MethodDescriptor<Q, R> method, Q request, String requestId) {
    String rid = requestIdOrNew(requestId);
    ClientCall<Q, R> call = channel.newCall(method, unaryOptions(rid));
    CompletableFuture<R> future = new CompletableFuture<>();
    future.whenComplete(
        (r, t) -> {
          if (t instanceof CancellationException) {
            call.cancel("future cancelled by the caller", null);
          }
        });
    ClientCalls.asyncUnaryCall(
        call,
        request,
        new StreamObserver<R>() {
          private R value;

          @Override
          public void onNext(R v) {
            value = v;
          }

          @Override
          public void onError(Throwable t) {
            future.completeExceptionally(XinserveExceptions.from(t, rid));
          }

          @Override
          public void onCompleted() {
            future.complete(value);
          }
        });
    return future;
  }

  <Q, R> ResponseStream<R> openStream(MethodDescriptor<Q, R> method, Q request, String requestId) {
    String rid = requestIdOrNew(requestId);
    // the stream's listener only enqueues: run it on the transport thread, saving a hop per token
    ClientCall<Q, R> call =
        channel.newCall(method, streamOptions(rid).withExecutor(MoreExecutors.directExecutor()));
    return new ResponseStream<>(call, request, rid, streamPrefetch, streamIdleTimeout);
  }

  <Q, R> CallHandle observe(
      MethodDescriptor<Q, R> method, Q request, String requestId, StreamListener<R> listener) {
    Objects.requireNonNull(listener, "listener");
    String rid = requestIdOrNew(requestId);
    ClientCall<Q, R> call = newStreamCall(method, rid);
    call.start(
        new ClientCall.Listener<R>() {
          private boolean delivered;

          @Override
          public void onMessage(R message) {
            delivered = true;
            try {
              listener.onNext(message);
            } catch (RuntimeException e) {
              call.cancel("StreamListener.onNext threw", e);
              return;
            }
            call.request(1);
          }

          @Override
          public void onClose(Status status, Metadata trailers) {
            if (status.isOk()) {
              listener.onCompleted();
            } else {
              listener.onError(XinserveExceptions.ofStream(status, trailers, rid, delivered));
            }
          }
        },
        new Metadata());
    call.sendMessage(request);
    call.halfClose();
    call.request(1);
    return new CallHandle() {
      @Override
      public void cancel() {
        call.cancel("cancelled by the caller", null);
      }

      @Override
      public String requestId() {
        return rid;
      }
    };
  }
}
