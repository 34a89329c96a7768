package io.xinserve.demo;

import static org.assertj.core.api.Assertions.assertThat;

import io.grpc.Server;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import io.xinserve.spring.boot.XinserveClientCustomizer;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.InferenceServiceGrpc;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;

/** The demo's SSE endpoint over an in-process fake server (the live server is in the ITs). */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class GenerationControllerTest {
  static final String NAME = InProcessServerBuilder.generateName();
  static final CountDownLatch CANCELLED = new CountDownLatch(1);
  static final AtomicInteger SENT = new AtomicInteger();
  static final Server SERVER;

  static {
    try {
      SERVER = InProcessServerBuilder.forName(NAME)
          .addService(new InferenceServiceGrpc.InferenceServiceImplBase() {
            @Override
            public void generateStream(GenerateRequest r, StreamObserver<GenerateStreamResponse> o) {
              var out = (ServerCallStreamObserver<GenerateStreamResponse>) o;
              out.setOnCancelHandler(CANCELLED::countDown);
              boolean endless = r.getSamplingParams().getIgnoreEos();
              int n = r.getSamplingParams().getMaxTokens();
              out.setOnReadyHandler(() -> {
                while (out.isReady() && !out.isCancelled()) {
                  int i = SENT.incrementAndGet();
                  if (!endless && i > n) {
                    out.onNext(GenerateStreamResponse.newBuilder().setText(".")
                        .setFinishReason(FinishReason.FINISH_REASON_LENGTH).build());
                    out.onCompleted();
                    return;
                  }
                  out.onNext(GenerateStreamResponse.newBuilder().setText(" t" + i).addTokenIds(i).build());
                }
              });
            }
          })
          .build()
          .start();
    } catch (java.io.IOException e) {
      throw new IllegalStateException(e);
    }
  }

  @TestConfiguration
  static class InProcess {
    @Bean
    XinserveClientCustomizer inProcess() {
      return (name, builder) -> builder.channelBuilder(InProcessChannelBuilder.forName(NAME));
    }
  }

  @LocalServerPort int port;

  @AfterAll
  static void stop() {
    SERVER.shutdownNow();
  }

  @Test
  void streamsTokensAsServerSentEvents() throws Exception {
    SENT.set(0);
    HttpResponse<java.util.stream.Stream<String>> r = HttpClient.newHttpClient().send(
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/api/generate/stream?prompt=x&maxTokens=3"))
            .GET().build(),
        HttpResponse.BodyHandlers.ofLines());
    List<String> lines = r.body().toList();
    // the leading space of each delta survives: tokens arrive as JSON
    assertThat(lines)
        .containsSubsequence("event:token", "data:{\"text\":\" t1\"}", "event:token", "data:{\"text\":\" t2\"}");
    assertThat(lines).contains("event:done", "data:FINISH_REASON_LENGTH");
  }

  @Test
  void httpDisconnectCancelsTheGrpcCall() throws Exception {
    try (Socket socket = new Socket("127.0.0.1", port)) {
      OutputStream out = socket.getOutputStream();
      out.write(("GET /api/generate/stream?prompt=x&ignoreEos=true HTTP/1.1\r\nHost: x\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.flush();
      BufferedReader in = new BufferedReader(new InputStreamReader(socket.getInputStream(), StandardCharsets.UTF_8));
      int tokens = 0;
      String line;
      while (tokens < 3 && (line = in.readLine()) != null) {
        if (line.equals("event:token")) {
          tokens++;
        }
      }
      assertThat(tokens).isEqualTo(3);
    }
    assertThat(CANCELLED.await(20, TimeUnit.SECONDS)).isTrue();
  }
}
