package io.xinserve.it;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.xinserve.client.ResponseStream;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.CancelledException;
import io.xinserve.client.errors.DeadlineExceededException;
import io.xinserve.client.errors.XinserveException;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Streams that cannot leak, and aborts that cannot look like answers, against the live server:
 * every test ends with {@code GetLoad().running} back at 0.
 */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class StreamLifecycleIT {
  private static XinserveClient client;

  @BeforeAll
  static void connect() {
    client = LiveServers.get().plainClient().build();
  }

  @AfterAll
  static void disconnect() {
    client.close();
  }

  private static GenerateRequest endless(String prompt) {
    int budget = Math.max(64, ClientIT.contextLengthOf(client) - 64);
    return ClientIT.greedy(prompt, budget).toBuilder()
        .setSamplingParams(
            ClientIT.greedy(prompt, budget).getSamplingParams().toBuilder().setIgnoreEos(true))
        .build();
  }

  /** Reads three deltas and drops the stream without closing it. */
  private static void readThreeAndForget(GenerateRequest r) {
    ResponseStream<GenerateStreamResponse> s = client.generateStream(r);
    for (int i = 0; i < 3; i++) {
      s.next();
    }
  }

  @Test
  void aStreamDroppedWithoutCloseIsCancelledByTheGarbageCollector() throws Exception {
    ClientIT.awaitIdle(client, Duration.ofSeconds(60));
    readThreeAndForget(endless("forgotten"));
    long end = System.nanoTime() + Duration.ofSeconds(180).toNanos();
    int running = -1;
    while (System.nanoTime() < end) {
      System.gc();
      var load = client.load();
      running = load.getRunning();
      if (running == 0 && load.getInFlight() == 0) {
        return;
      }
      Thread.sleep(200);
    }
    throw new AssertionError("the dropped stream still runs: GetLoad().running = " + running);
  }

  @Test
  void aStreamNobodyReadsIsCancelledByItsIdleTimeout() throws Exception {
    ClientIT.awaitIdle(client, Duration.ofSeconds(60));
    // prefetch 1: once the first delta is delivered, no more arrive until the reader reads
    try (XinserveClient idle =
            LiveServers.get().plainClient().streamPrefetch(1).streamIdleTimeout(Duration.ofSeconds(2)).build();
        ResponseStream<GenerateStreamResponse> s = idle.generateStream(endless("unread"))) {
      long end = System.nanoTime() + Duration.ofSeconds(180).toNanos();
      while (!s.isFinished() && System.nanoTime() < end) {
        Thread.sleep(100);
      }
      assertThat(s.isFinished()).as("idle timeout ended the call").isTrue();
      assertThatThrownBy(() -> s.forEachRemaining(d -> {}))
          .isInstanceOf(DeadlineExceededException.class)
          .hasMessageContaining("idle");
    }
    ClientIT.awaitIdle(client, Duration.ofSeconds(60));
  }

  @Test
  void anAbortedStreamFailsCancelledWithItsRequestId() throws Exception {
    ClientIT.awaitIdle(client, Duration.ofSeconds(60));
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(endless("abort me"))) {
      s.next();
      assertThat(client.abort(s.requestId())).isTrue();
      assertThatThrownBy(() -> s.forEachRemaining(d -> {}))
          .isInstanceOfSatisfying(
              CancelledException.class, e -> assertThat(e.requestId()).contains(s.requestId()));
    }
    ClientIT.awaitIdle(client, Duration.ofSeconds(60));
  }

  @Test
  void anAbortedUnaryCallFailsCancelledInsteadOfReturningTruncatedText() throws Exception {
    ClientIT.awaitIdle(client, Duration.ofSeconds(60));
    String rid = "it-abort-unary-" + System.nanoTime();
    CompletableFuture<GenerateResponse> f =
        client.withDeadline(Duration.ofSeconds(240)).generateAsync(endless("abort the unary call").toBuilder().setRequestId(rid).build());
    long end = System.nanoTime() + Duration.ofSeconds(120).toNanos();
    boolean aborted = false;
    while (!aborted && !f.isDone() && System.nanoTime() < end) {
      aborted = client.abort(rid);
      if (!aborted) {
        Thread.sleep(100);
      }
    }
    assertThat(aborted).as("the running request was found and aborted").isTrue();
    assertThatThrownBy(() -> f.get(120, TimeUnit.SECONDS))
        .isInstanceOf(ExecutionException.class)
        .cause()
        .isInstanceOfSatisfying(
            CancelledException.class, e -> assertThat(((XinserveException) e).requestId()).contains(rid));
    ClientIT.awaitIdle(client, Duration.ofSeconds(60));
  }
}
