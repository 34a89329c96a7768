package io.xinserve.demo;

import io.xinserve.client.Cancellable;
import io.xinserve.client.StreamListener;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.CancelledException;
import io.xinserve.client.errors.InvalidArgumentException;
import io.xinserve.client.errors.NotFoundException;
import io.xinserve.client.errors.XinserveException;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.Model;
import io.xinserve.v1.SamplingParams;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;
import java.util.Map;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.servlet.mvc.method.annotation.SseEmitter;

/** REST and Server-Sent-Events endpoints over the auto-configured {@link XinserveClient}. */
@RestController
@RequestMapping("/api")
public class GenerationController {
  private final XinserveClient client;
  private final String defaultModel;

  /**
   * @param client the auto-configured client
   * @param defaultModel the model used when a request names none ({@code demo.model})
   */
  public GenerationController(XinserveClient client, @Value("${demo.model}") String defaultModel) {
    this.client = client;
    this.defaultModel = defaultModel;
  }

  /**
   * A completion request.
   *
   * @param prompt the prompt
   * @param model the model, or {@code null} for the default
   * @param maxTokens at most this many tokens, or {@code null} for the model's limit
   * @param temperature sampling temperature, or {@code null} for the model's default
   */
  public record Completion(String prompt, String model, Integer maxTokens, Float temperature) {}

  /**
   * A completion result.
   *
   * @param requestId the request id
   * @param text the generated text
   * @param finishReason why it ended
   * @param promptTokens tokens in the prompt
   * @param completionTokens tokens generated
   */
  public record CompletionResult(
      String requestId, String text, String finishReason, int promptTokens, int completionTokens) {}

  /** @return the served model names */
  @GetMapping("/models")
  public List<String> models() {
    return client.listModels().stream().map(Model::getName).toList();
  }

  /**
   * Generates a completion and returns it whole.
   *
   * @param body the request
   * @return the result
   */
  @PostMapping("/generate")
  public CompletionResult generate(@RequestBody Completion body) {
    GenerateResponse r = client.generate(request(body.prompt(), body.model(), body.maxTokens(), body.temperature()));
    var out = r.getOutputs(0);
    return new CompletionResult(
        r.getRequestId(),
        out.getText(),
        out.getFinishReason().name(),
        r.getUsage().getPromptTokens(),
        r.getUsage().getCompletionTokens());
  }

  /**
   * Streams a completion as Server-Sent Events: {@code token} events carry a text delta as JSON
   * {@code {"text": "..."}} (so leading spaces and newlines survive: an EventSource strips one
   * space after {@code data:} and splits lines), a final {@code done} event the finish reason, an
   * {@code error} event the gRPC status. When the HTTP
   * client goes away, the next write fails and the gRPC call is cancelled, which aborts the
   * server's engine request.
   *
   * @param prompt the prompt
   * @param model the model, or the default
   * @param maxTokens at most this many tokens
   * @param temperature sampling temperature
   * @param ignoreEos keep generating after end-of-sequence (for demos of long streams)
   * @return the SSE emitter
   */
  @GetMapping(path = "/generate/stream", produces = MediaType.TEXT_EVENT_STREAM_VALUE)
  public SseEmitter stream(
      @RequestParam String prompt,
      @RequestParam(required = false) String model,
      @RequestParam(required = false) Integer maxTokens,
      @RequestParam(required = false) Float temperature,
      @RequestParam(defaultValue = "false") boolean ignoreEos) {
    SseEmitter emitter = new SseEmitter(0L);
    GenerateRequest req = request(prompt, model, maxTokens, temperature);
    if (ignoreEos) {
      req = req.toBuilder()
          .setSamplingParams(req.getSamplingParams().toBuilder().setIgnoreEos(true))
          .build();
    }
    Cancellable call =
        client.generateStream(
            req,
            new StreamListener<>() {
              @Override
              public void onNext(GenerateStreamResponse delta) {
                try {
                  if (!delta.getText().isEmpty()) {
                    emitter.send(
                        SseEmitter.event()
                            .name("token")
                            .data(Map.of("text", delta.getText()), MediaType.APPLICATION_JSON));
                  }
                  if (delta.getFinishReason().getNumber() != 0) {
                    emitter.send(SseEmitter.event().name("done").data(delta.getFinishReason().name()));
                  }
                } catch (IOException e) {
                  // the HTTP client went away: throwing cancels the gRPC call
                  throw new UncheckedIOException(e);
                }
              }

              @Override
              public void onCompleted() {
                emitter.complete();
              }

              @Override
              public void onError(XinserveException error) {
                if (error instanceof CancelledException) {
                  emitter.complete();
                  return;
                }
                try {
                  emitter.send(SseEmitter.event().name("error").data(error.code().name()));
                  emitter.complete();
                } catch (IOException | IllegalStateException e) {
                  emitter.completeWithError(e);
                }
              }
            });
    emitter.onTimeout(call::cancel);
    emitter.onError(t -> call.cancel());
    emitter.onCompletion(call::cancel); // no-op after a normal end
    return emitter;
  }

  private GenerateRequest request(String prompt, String model, Integer maxTokens, Float temperature) {
    SamplingParams.Builder sp = SamplingParams.newBuilder();
    if (maxTokens != null) {
      sp.setMaxTokens(maxTokens);
    }
    if (temperature != null) {
      sp.setTemperature(temperature);
    }
    return GenerateRequest.newBuilder()
        .setModel(model == null || model.isBlank() ? defaultModel : model)
        .setPrompt(prompt == null ? "" : prompt)
        .setSamplingParams(sp)
        .build();
  }

  /**
   * @param e invalid parameters
   * @return 400 with the offending fields
   */
  @ExceptionHandler(InvalidArgumentException.class)
  public ResponseEntity<Map<String, Object>> invalid(InvalidArgumentException e) {
    return ResponseEntity.badRequest()
        .body(Map.of("code", e.code().name(), "fields", e.fieldViolations().stream()
            .map(v -> Map.of("field", v.field(), "description", v.description())).toList()));
  }

  /**
   * @param e unknown model
   * @return 404
   */
  @ExceptionHandler(NotFoundException.class)
  public ResponseEntity<Map<String, Object>> notFound(NotFoundException e) {
    return ResponseEntity.status(HttpStatus.NOT_FOUND).body(Map.of("code", e.code().name()));
  }

  /**
   * @param e any other failure
   * @return 502, or 503 if retrying later may help
   */
  @ExceptionHandler(XinserveException.class)
  public ResponseEntity<Map<String, Object>> failed(XinserveException e) {
    HttpStatus s = e.isRetryable() ? HttpStatus.SERVICE_UNAVAILABLE : HttpStatus.BAD_GATEWAY;
    return ResponseEntity.status(s).body(Map.of("code", e.code().name()));
  }
}
