package io.xinserve.it;

import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.xinserve.client.XinserveClient;
import io.xinserve.v1.ChatMessage;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.SamplingParams;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.http.MediaType;
import org.springframework.http.codec.ServerSentEvent;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import reactor.core.publisher.Flux;

/**
 * docs/java.md's "Spring AI in ten lines" controller in a real Boot web app against the live
 * server, its SSE read as a browser's EventSource reads it ({@link #parse}, the WHATWG HTML
 * standard's event-stream interpretation): the JSON payloads give back the model's exact text,
 * while plain-text {@code data:} (the form the docs no longer show) loses leading spaces.
 */
@ExtendWith(XinserveServerExtension.class)
@SpringBootTest(
    classes = SpringAiSseIT.AskApp.class,
    webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class SpringAiSseIT {
  private static final String QUESTION = "Tell me about the sea.";

  @LocalServerPort int port;
  @Autowired ObjectMapper json;

  @DynamicPropertySource
  static void server(DynamicPropertyRegistry registry) {
    LiveServers s = LiveServers.get();
    registry.add("xinserve.client.address", () -> "dns:///127.0.0.1:" + s.server.port);
    registry.add("xinserve.client.plaintext", () -> "true");
    registry.add("xinserve.client.token", () -> LiveServers.TOKEN);
    registry.add("xinserve.client.model", () -> TINY);
    registry.add("xinserve.ai.chat.options.temperature", () -> "0");
    registry.add("xinserve.ai.chat.options.max-tokens", () -> "24");
  }

  /** The docs' example, as written there. */
  @RestController
  static class AskController {
    private final ChatClient chat;

    AskController(ChatModel xinserve) {
      this.chat = ChatClient.create(xinserve);
    }

    @GetMapping(path = "/ask", produces = MediaType.TEXT_EVENT_STREAM_VALUE)
    Flux<ServerSentEvent<Map<String, String>>> ask(@RequestParam String q) {
      return chat.prompt().system("Answer briefly.").user(q).stream().content()
          .map(text -> ServerSentEvent.builder(Map.of("text", text)).event("token").build());
    }

    /** The plain-text form, for contrast. */
    @GetMapping(path = "/ask-plain", produces = MediaType.TEXT_EVENT_STREAM_VALUE)
    Flux<String> askPlain(@RequestParam String q) {
      return chat.prompt().system("Answer briefly.").user(q).stream().content();
    }
  }

  @Configuration(proxyBeanMethods = false)
  @EnableAutoConfiguration
  @Import(AskController.class)
  static class AskApp {}

  /** One dispatched event: its type and data. */
  record Event(String type, String data) {}

  /**
   * Interprets a {@code text/event-stream} body as the WHATWG HTML standard (§9.2.6, "Interpreting
   * an event stream") says: lines end at CRLF, LF or CR; an empty line dispatches the event; a line
   * starting with {@code :} is a comment; otherwise the field name is up to the first {@code :} and
   * the value after it, with ONE leading space removed; {@code data} appends the value and a LF,
   * {@code event} sets the type; on dispatch an empty data buffer dispatches nothing, the last LF is
   * removed and the type defaults to {@code message}. A trailing event without its empty line is
   * not dispatched.
   */
  static List<Event> parse(String body) {
    List<Event> events = new ArrayList<>();
    StringBuilder data = new StringBuilder();
    String type = "";
    String text = body.startsWith("\uFEFF") ? body.substring(1) : body;
    String[] lines = text.split("\r\n|\n|\r", -1);
    // the last element follows the last line end: an unterminated line, never processed
    for (int i = 0; i < lines.length - 1; i++) {
      String line = lines[i];
      if (line.isEmpty()) {
        if (data.length() > 0) {
          data.setLength(data.length() - 1);
          events.add(new Event(type.isEmpty() ? "message" : type, data.toString()));
        }
        data.setLength(0);
        type = "";
        continue;
      }
      if (line.startsWith(":")) {
        continue;
      }
      int colon = line.indexOf(':');
      String field = colon < 0 ? line : line.substring(0, colon);
      String value = colon < 0 ? "" : line.substring(colon + 1);
      if (value.startsWith(" ")) {
        value = value.substring(1);
      }
      if (field.equals("data")) {
        data.append(value).append('\n');
      } else if (field.equals("event")) {
        type = value;
      }
    }
    return events;
  }

  private String get(String path) throws Exception {
    HttpResponse<String> r =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(
                        URI.create(
                            "http://127.0.0.1:" + port + path + "?q="
                                + URLEncoder.encode(QUESTION, StandardCharsets.UTF_8)))
                    .header("Accept", "text/event-stream")
                    .build(),
                HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
    assertThat(r.statusCode()).isEqualTo(200);
    return r.body();
  }

  private static String grpcAnswer() {
    try (XinserveClient grpc = LiveServers.get().plainClient().build()) {
      return grpc.chat(
              ChatRequest.newBuilder()
                  .setModel(TINY)
                  .addMessages(ChatMessage.newBuilder().setRole("system").setContent("Answer briefly."))
                  .addMessages(ChatMessage.newBuilder().setRole("user").setContent(QUESTION))
                  .setSamplingParams(SamplingParams.newBuilder().setTemperature(0f).setMaxTokens(24))
                  .build())
          .getOutputs(0)
          .getText();
    }
  }

  @Test
  void anEventSourceReadsTheDocsExampleAsTheModelsExactText() throws Exception {
    String expected = grpcAnswer();
    // words separated by spaces: the case an EventSource breaks for plain-text data
    assertThat(expected.trim()).contains(" ");

    StringBuilder text = new StringBuilder();
    List<Event> events = parse(get("/ask"));
    assertThat(events).isNotEmpty().allSatisfy(e -> assertThat(e.type()).isEqualTo("token"));
    for (Event e : events) {
      text.append(json.readTree(e.data()).get("text").asText());
    }
    assertThat(text.toString()).isEqualTo(expected);

    StringBuilder plain = new StringBuilder();
    parse(get("/ask-plain")).forEach(e -> plain.append(e.data()));
    assertThat(plain.toString()).isNotEqualTo(expected);
  }
}
