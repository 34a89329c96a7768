package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;

import io.grpc.Server;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import io.xinserve.client.errors.UnavailableException;
import io.xinserve.client.errors.XinserveException;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.InferenceServiceGrpc;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A stream that ends UNAVAILABLE after it delivered messages (a real Netty server whose stream
 * fails mid-generation) fails with a non-retryable exception marked {@code afterMessages}, in each call
 * style; a stream that fails before its first message stays retryable.
 */
@Timeout(60)
class StreamCutOffTest {
  private Server server;
  private XinserveClient client;

  /** Sends two deltas and ends the stream UNAVAILABLE, or (no deltas) ends it UNAVAILABLE at once. */
  private void start(boolean deltas) throws Exception {
    server =
        NettyServerBuilder.forAddress(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))
            .addService(
                new InferenceServiceGrpc.InferenceServiceImplBase() {
                  @Override
                  public void generateStream(
                      GenerateRequest request, StreamObserver<GenerateStreamResponse> out) {
                    if (!deltas) {
                      out.onError(Status.UNAVAILABLE.withDescription("draining").asRuntimeException());
                      return;
                    }
                    out.onNext(GenerateStreamResponse.newBuilder().setText("a").build());
                    out.onNext(GenerateStreamResponse.newBuilder().setText("b").build());
                    out.onError(
                        Status.UNAVAILABLE.withDescription("engine died").asRuntimeException());
                  }
                })
            .build()
            .start();
    client =
        XinserveClient.builder()
            .address("127.0.0.1", server.getPort())
            .plaintext()
            .retryPolicy(RetryPolicy.none())
            .build();
  }

  @AfterEach
  void stop() throws Exception {
    if (client != null) {
      client.close();
    }
    if (server != null) {
      server.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
  }

  private static GenerateRequest req() {
    return GenerateRequest.newBuilder().setModel("m").setPrompt("p").build();
  }

  private static void assertCutOff(Throwable t) {
    assertThat(t).isInstanceOf(UnavailableException.class);
    XinserveException e = (XinserveException) t;
    assertThat(e.afterMessages()).isTrue();
    assertThat(e.isRetryable()).isFalse();
  }

  @Test
  void aBlockingStreamCutAfterItsDeltasIsNotRetryable() throws Exception {
    start(true);
    List<String> got = new ArrayList<>();
    Throwable failure = null;
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(req())) {
      got.add(s.next().getText());
      got.add(s.next().getText());
      try {
        s.hasNext();
      } catch (XinserveException e) {
        failure = e;
      }
    }
    assertThat(got).containsExactly("a", "b");
    assertCutOff(failure);
  }

  @Test
  void aReactorStreamCutAfterItsDeltasIsNotRetryable() throws Exception {
    start(true);
    CompletableFuture<Throwable> failure = new CompletableFuture<>();
    List<String> got = new java.util.concurrent.CopyOnWriteArrayList<>();
    client
        .reactor()
        .generateStream(req())
        .subscribe(
            d -> {
              got.add(d.getText());
            },
            failure::complete);
    assertCutOff(failure.get(30, TimeUnit.SECONDS));
    assertThat(got).containsExactly("a", "b");
  }

  @Test
  void aListenerStreamCutAfterItsDeltasIsNotRetryable() throws Exception {
    start(true);
    CompletableFuture<XinserveException> failure = new CompletableFuture<>();
    List<String> got = new java.util.concurrent.CopyOnWriteArrayList<>();
    client.generateStream(
        req(),
        new StreamListener<>() {
          @Override
          public void onNext(GenerateStreamResponse d) {
            got.add(d.getText());
          }

          @Override
          public void onError(XinserveException e) {
            failure.complete(e);
          }
        });
    assertCutOff(failure.get(30, TimeUnit.SECONDS));
    assertThat(got).containsExactly("a", "b");
  }

  @Test
  void aStreamFailingBeforeItsFirstMessageStaysRetryable() throws Exception {
    start(false);
    Throwable failure = null;
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(req())) {
      s.hasNext();
    } catch (XinserveException e) {
      failure = e;
    }
    assertThat(failure).isInstanceOf(UnavailableException.class);
    assertThat(((XinserveException) failure).afterMessages()).isFalse();
    assertThat(((XinserveException) failure).isRetryable()).isTrue();
  }
}
