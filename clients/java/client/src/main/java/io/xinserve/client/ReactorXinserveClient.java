package io.xinserve.client;

import io.grpc.ClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.xinserve.client.errors.XinserveExceptions;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatResponse;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.EmbedRequest;
import io.xinserve.v1.EmbedResponse;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.InferenceServiceGrpc;
import reactor.core.publisher.Flux;
import reactor.core.publisher.FluxSink;
import reactor.core.publisher.Mono;

/**
 * Reactor forms of the {@link XinserveClient} calls. Needs {@code io.projectreactor:reactor-core}.
 *
 * <p>Streams are cold: each subscription starts one gRPC call. Backpressure is real: the client
 * asks the server for exactly as many messages as the subscriber requested (gRPC flow control),
 * so a slow subscriber slows the stream instead of filling a buffer. Cancelling the subscription
 * (e.g. {@code take(n)}, {@code timeout}, an HTTP client going away in WebFlux) cancels the call
 * and so aborts the engine request. Errors are {@link io.xinserve.client.errors.XinserveException}s.
 */
public final class ReactorXinserveClient {
  private final XinserveClient client;

  ReactorXinserveClient(XinserveClient client) {
    this.client = client;
  }

  /**
   * @param request the request
   * @return a cold Flux of generation deltas
   */
  public Flux<GenerateStreamResponse> generateStream(GenerateRequest request) {
    request = client.withModel(request);
    return flux(InferenceServiceGrpc.getGenerateStreamMethod(), request, request.getRequestId());
  }

  /**
   * @param request the request
   * @return a cold Flux of chat deltas
   */
  public Flux<ChatStreamResponse> chatStream(ChatRequest request) {
    request = client.withModel(request);
    return flux(InferenceServiceGrpc.getChatStreamMethod(), request, request.getRequestId());
  }

  /**
   * Streams a whole completion of a prompt with the client's default model as text pieces, until
   * the end-of-sequence token or the end of the context ({@code max_tokens} as in {@link
   * XinserveClient#generateText}: a {@code Tokenize} call first, on Reactor's bounded-elastic
   * scheduler); cancelling the subscription cancels the call.
   *
   * @param prompt the prompt
   * @return a cold Flux of the non-empty text deltas
   * @throws IllegalStateException if the client has no default model
   */
  public Flux<String> streamText(String prompt) {
    client.requireModel();
    return Mono.fromCallable(() -> client.wholeCompletion(prompt))
        .subscribeOn(reactor.core.scheduler.Schedulers.boundedElastic())
        .flatMapMany(this::generateStream)
        .map(GenerateStreamResponse::getText)
        .filter(t -> !t.isEmpty());
  }

  /**
   * @param request the request
   * @return a cold Mono of the response; cancelling it cancels the call
   */
  public Mono<GenerateResponse> generate(GenerateRequest request) {
    return Mono.fromFuture(() -> client.generateAsync(request), false);
  }

  /**
   * @param request the request
   * @return a cold Mono of the reply; cancelling it cancels the call
   */
  public Mono<ChatResponse> chat(ChatRequest request) {
    return Mono.fromFuture(() -> client.chatAsync(request), false);
  }

  /**
   * @param request the request
   * @return a cold Mono of the embeddings; cancelling it cancels the call
   */
  public Mono<EmbedResponse> embed(EmbedRequest request) {
    return Mono.fromFuture(() -> client.embedAsync(request), false);
  }

  private <Q, R> Flux<R> flux(MethodDescriptor<Q, R> method, Q request, String requestId) {
    return Flux.create(
        sink -> {
          String rid = Calls.requestIdOrNew(requestId);
          ClientCall<Q, R> call = client.calls().newStreamCall(method, rid);
          Object lock = new Object();
          call.start(
              new ClientCall.Listener<R>() {
                private boolean delivered;

                @Override
                public void onMessage(R message) {
                  delivered = true;
                  sink.next(message);
                }

                @Override
                public void onClose(Status status, Metadata trailers) {
                  if (status.isOk()) {
                    sink.complete();
                  } else {
                    sink.error(XinserveExceptions.ofStream(status, trailers, rid, delivered));
                  }
                }
              },
              new Metadata());
          call.sendMessage(request);
          call.halfClose();
          sink.onCancel(() -> call.cancel("subscription cancelled", null));
          sink.onRequest(
              n -> {
                synchronized (lock) {
                  call.request((int) Math.min(n, Integer.MAX_VALUE));
                }
              });
        },
        FluxSink.OverflowStrategy.BUFFER);
  }
}
