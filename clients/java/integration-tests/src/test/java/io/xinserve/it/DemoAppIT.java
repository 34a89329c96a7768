package io.xinserve.it;

import static org.assertj.core.api.Assertions.assertThat;

import io.micrometer.core.instrument.MeterRegistry;
import io.xinserve.client.XinserveClient;
import io.xinserve.demo.DemoApplication;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/** The demo app against the live server: REST, SSE streaming, and an HTTP disconnect that cancels. */
@ExtendWith(XinserveServerExtension.class)
@SpringBootTest(classes = DemoApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class DemoAppIT {
  @LocalServerPort int port;
  @Autowired MeterRegistry meters;

  private static XinserveClient observer;

  @DynamicPropertySource
  static void server(DynamicPropertyRegistry registry) {
    LiveServers s = LiveServers.get();
    registry.add("xinserve.client.address", () -> "dns:///127.0.0.1:" + s.server.port);
    registry.add("xinserve.client.plaintext", () -> "true");
    registry.add("xinserve.client.token", () -> LiveServers.TOKEN);
    registry.add("demo.model", () -> LiveServers.TINY);
  }

  @BeforeAll
  static void connect() {
    observer = LiveServers.get().plainClient().build();
  }

  @AfterAll
  static void disconnect() {
    observer.close();
  }

  private static String q(String s) {
    return URLEncoder.encode(s, StandardCharsets.UTF_8);
  }

  @Test
  void restGenerate() throws Exception {
    HttpResponse<String> r = HttpClient.newHttpClient().send(
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/api/generate"))
            .header("content-type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"hello\",\"maxTokens\":8,\"temperature\":0}"))
            .build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).isEqualTo(200);
    assertThat(r.body()).contains("\"completionTokens\":").contains("\"finishReason\":\"FINISH_REASON_");
  }

  @Test
  void restInvalidParametersAre400WithTheField() throws Exception {
    HttpResponse<String> r = HttpClient.newHttpClient().send(
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/api/generate"))
            .header("content-type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"hello\",\"maxTokens\":8,\"temperature\":-3}"))
            .build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).isEqualTo(400);
    assertThat(r.body()).contains("sampling_params.temperature");
  }

  @Test
  void sseStreamsTokensToTheEndAndTheirTextIsTheGrpcAnswer() throws Exception {
    HttpResponse<java.util.stream.Stream<String>> r = HttpClient.newHttpClient().send(
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port
                + "/api/generate/stream?maxTokens=16&temperature=0&model=" + LiveServers.TINY
                + "&prompt=" + q("Once upon a time")))
            .header("accept", "text/event-stream").GET().build(),
        HttpResponse.BodyHandlers.ofLines());
    assertThat(r.statusCode()).isEqualTo(200);
    assertThat(r.headers().firstValue("content-type")).get().asString().startsWith("text/event-stream");
    List<String> lines = r.body().toList();
    assertThat(lines.stream().filter(l -> l.equals("event:token")).count()).isPositive();
    assertThat(lines).contains("event:done");
    // join the token events' text exactly as a browser's EventSource + JSON.parse would
    com.fasterxml.jackson.databind.ObjectMapper json = new com.fasterxml.jackson.databind.ObjectMapper();
    StringBuilder joined = new StringBuilder();
    for (int i = 0; i + 1 < lines.size(); i++) {
      if (lines.get(i).equals("event:token")) {
        String data = lines.get(i + 1);
        assertThat(data).startsWith("data:");
        joined.append(json.readTree(data.substring("data:".length())).get("text").asText());
      }
    }
    String expected = observer.generate(ClientIT.greedy("Once upon a time", 16)).getOutputs(0).getText();
    assertThat(joined.toString()).isEqualTo(expected);
  }

  @Test
  void httpDisconnectCancelsTheGrpcCall() throws Exception {
    ClientIT.awaitIdleOn(observer, Duration.ofSeconds(30));
    double cancelledBefore = cancellations();
    try (Socket socket = new Socket("127.0.0.1", port)) {
      OutputStream out = socket.getOutputStream();
      out.write(("GET /api/generate/stream?ignoreEos=true&temperature=0&maxTokens=" + (ClientIT.contextLengthOf(observer) - 64)
              + "&prompt=" + q("a very long story") + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.flush();
      BufferedReader in = new BufferedReader(new InputStreamReader(socket.getInputStream(), StandardCharsets.UTF_8));
      List<String> tokens = new ArrayList<>();
      String line;
      while (tokens.size() < 3 && (line = in.readLine()) != null) {
        if (line.equals("event:token")) {
          tokens.add(line);
        }
      }
      assertThat(tokens).hasSize(3);
      assertThat(observer.load().getRunning()).isEqualTo(1);
    } // the browser goes away
    ClientIT.awaitIdleOn(observer, Duration.ofSeconds(15));
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (cancellations() <= cancelledBefore && System.nanoTime() < end) {
      Thread.sleep(50);
    }
    assertThat(cancellations()).isGreaterThan(cancelledBefore);
  }

  private double cancellations() {
    return meters.find("xinserve.client.cancellations").counters().stream()
        .mapToDouble(io.micrometer.core.instrument.Counter::count)
        .sum();
  }
}
