package io.xinserve.spring.ai;

import io.xinserve.client.XinserveClient;
import io.xinserve.v1.ChatMessage;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.CompletionOutput;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.SamplingParams;
import io.xinserve.v1.Usage;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.metadata.ChatGenerationMetadata;
import org.springframework.ai.chat.metadata.ChatResponseMetadata;
import org.springframework.ai.chat.metadata.DefaultUsage;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.model.Generation;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.chat.prompt.Prompt;
import reactor.core.publisher.Flux;

/**
 * A Spring AI {@link ChatModel} served by xinserve, over the xinserve SDK's {@code Chat} and
 * {@code ChatStream} calls (the model's own chat template is applied by the server).
 *
 * <ul>
 *   <li>Messages: SYSTEM, USER, ASSISTANT and TOOL map to the roles {@code system}, {@code user},
 *       {@code assistant}, {@code tool}; their text is sent as is.
 *   <li>Options: the prompt's {@link ChatOptions} override this model's defaults field by field,
 *       then map to {@code SamplingParams} as {@link XinserveChatOptions} describes. The model is
 *       the options' model, else the default options' model, else the client's default model.
 *   <li>Results: one {@link Generation} per completion, its finish reason the contract's name
 *       without prefix ({@code STOP}, {@code LENGTH}, ...); metadata carries the request id (the
 *       key of the call's audit record), the model and token usage.
 *   <li>Streaming: one {@link ChatResponse} per delta. Cancelling the {@code Flux} (dispose,
 *       {@code take}, an HTTP client leaving) cancels the gRPC call, which aborts the engine
 *       request on the server.
 *   <li>Tools: the contract's {@code Chat} has no tool calling. A prompt whose options carry
 *       tools ({@code ChatClient}'s {@code .tools(...)}, {@code .toolCallbacks(...)}, {@code
 *       .toolNames(...)}, or {@code ToolCallingChatOptions} with callbacks) is refused with an
 *       {@link UnsupportedOperationException} naming them, before any call: the model would
 *       answer without ever calling them.
 *   <li>Errors: a {@link org.springframework.ai.retry.TransientAiException} (UNAVAILABLE,
 *       RESOURCE_EXHAUSTED) or {@link org.springframework.ai.retry.NonTransientAiException}
 *       (anything else), whose cause is the typed {@link
 *       io.xinserve.client.errors.XinserveException}.
 * </ul>
 */
public class XinserveChatModel implements ChatModel {
  private final XinserveClient client;
  private final XinserveChatOptions defaults;

  /**
   * @param client the xinserve client to call through
   * @param defaults default options ({@code model} among them), may be {@code null}
   */
  public XinserveChatModel(XinserveClient client, XinserveChatOptions defaults) {
    this.client = Objects.requireNonNull(client, "client");
    this.defaults = defaults == null ? new XinserveChatOptions() : defaults.copy();
  }

  /** @return the client this model calls through */
  public XinserveClient client() {
    return client;
  }

  /**
   * @return a copy of this model's default options (Spring AI 1.1's {@code ChatModel} method;
   *     deprecated in Spring AI 2.0 for {@link #getOptions()})
   */
  @Override
  @SuppressWarnings({"deprecation", "removal"})
  public ChatOptions getDefaultOptions() {
    return defaults.copy();
  }

  /**
   * The options {@code ChatClient} of Spring AI 2.0 starts every request from ({@code
   * getOptions().mutate().combineWith(perCallBuilder)}): an {@link XinserveChatOptions}, so its
   * builder keeps every xinserve field of the per-call options and takes tools and the native
   * structured-output schema.
   *
   * @return a copy of this model's default options
   */
  public XinserveChatOptions getOptions() {
    return defaults.copy();
  }

  /**
   * Sends the prompt and waits for the reply.
   *
   * @param prompt the messages and options
   * @return the reply, one generation per completion
   * @throws org.springframework.ai.retry.NonTransientAiException or {@link
   *     org.springframework.ai.retry.TransientAiException} on failure, caused by the {@link
   *     io.xinserve.client.errors.XinserveException}
   * @throws UnsupportedOperationException if the prompt's options offer tools (nothing is sent)
   */
  @Override
  public ChatResponse call(Prompt prompt) {
    ChatRequest request = toRequest(prompt);
    io.xinserve.v1.ChatResponse r;
    try {
      r = client.chat(request);
    } catch (RuntimeException e) {
      throw XinserveAiErrors.map(e);
    }
    List<Generation> generations = new ArrayList<>(r.getOutputsCount());
    for (CompletionOutput out : r.getOutputsList()) {
      generations.add(
          new Generation(
              new AssistantMessage(out.getText()),
              ChatGenerationMetadata.builder().finishReason(name(out.getFinishReason())).build()));
    }
    return new ChatResponse(generations, metadata(r.getRequestId(), request.getModel(), r.getUsage()));
  }

  /**
   * Streams the reply: one {@link ChatResponse} per delta; the last one carries the finish reason
   * and the usage. Cold: each subscription is one call; cancelling the subscription cancels it.
   *
   * @param prompt the messages and options
   * @return the deltas
   */
  @Override
  public Flux<ChatResponse> stream(Prompt prompt) {
    return Flux.defer(
        () -> {
          ChatRequest request = toRequest(prompt);
          return client
              .reactor()
              .chatStream(request)
              .map(d -> toChunk(d, request.getModel()))
              .onErrorMap(XinserveAiErrors::map);
        });
  }

  private ChatResponse toChunk(ChatStreamResponse d, String model) {
    ChatGenerationMetadata md =
        d.getFinishReason() == FinishReason.FINISH_REASON_UNSPECIFIED
            ? ChatGenerationMetadata.NULL
            : ChatGenerationMetadata.builder().finishReason(name(d.getFinishReason())).build();
    return new ChatResponse(
        List.of(new Generation(new AssistantMessage(d.getText()), md)),
        metadata(d.getRequestId(), model, d.hasUsage() ? d.getUsage() : null));
  }

  private static ChatResponseMetadata metadata(String requestId, String model, Usage usage) {
    ChatResponseMetadata.Builder b = ChatResponseMetadata.builder().id(requestId).model(model);
    if (usage != null) {
      b.usage(new DefaultUsage(usage.getPromptTokens(), usage.getCompletionTokens(), null, usage));
    }
    return b.build();
  }

  static String name(FinishReason r) {
    String n = r.name();
    return n.startsWith("FINISH_REASON_") ? n.substring("FINISH_REASON_".length()) : n;
  }

  /**
   * @param prompt the Spring AI prompt
   * @return the contract's request for it
   * @throws IllegalArgumentException if no model is known (options, defaults or the client's)
   * @throws UnsupportedOperationException if the options offer tools
   */
  ChatRequest toRequest(Prompt prompt) {
    XinserveChatOptions o = defaults.merge(prompt.getOptions());
    List<String> tools = o.requestedTools();
    if (!tools.isEmpty()) {
      throw new UnsupportedOperationException(
          "xinserve chat models cannot call tools (the xinserve.v1 Chat call has no tool calling),"
              + " but the prompt offers the tools "
              + tools
              + ": refused rather than answered without them; remove .tools(...)/.toolCallbacks(...)"
              + " from the ChatClient call or use a chat model with tool calling");
    }
    String model = o.getModel();
    if (model == null || model.isBlank()) {
      model = client.defaultModel().orElse(null);
    }
    if (model == null || model.isBlank()) {
      throw new IllegalArgumentException(
          "no model: set xinserve.ai.chat.model or xinserve.client.model, or the prompt's"
              + " ChatOptions model");
    }
    ChatRequest.Builder b = ChatRequest.newBuilder().setModel(model);
    for (Message m : prompt.getInstructions()) {
      b.addMessages(
          ChatMessage.newBuilder()
              .setRole(m.getMessageType().name().toLowerCase(Locale.ROOT))
              .setContent(m.getText() == null ? "" : m.getText()));
    }
    b.setSamplingParams(sampling(o));
    return b.build();
  }

  static SamplingParams sampling(XinserveChatOptions o) {
    SamplingParams.Builder sp = SamplingParams.newBuilder();
    if (o.getTemperature() != null) {
      sp.setTemperature(o.getTemperature().floatValue());
    }
    if (o.getTopP() != null) {
      sp.setTopP(o.getTopP().floatValue());
    }
    if (o.getTopK() != null) {
      sp.setTopK(o.getTopK());
    }
    if (o.getMaxTokens() != null) {
      sp.setMaxTokens(o.getMaxTokens());
    }
    if (o.getStopSequences() != null) {
      sp.addAllStop(o.getStopSequences());
    }
    if (o.getPresencePenalty() != null) {
      sp.setPresencePenalty(o.getPresencePenalty().floatValue());
    }
    if (o.getFrequencyPenalty() != null) {
      sp.setFrequencyPenalty(o.getFrequencyPenalty().floatValue());
    }
    if (o.getRepetitionPenalty() != null) {
      sp.setRepetitionPenalty(o.getRepetitionPenalty().floatValue());
    }
    if (o.getSeed() != null) {
      sp.setSeed(o.getSeed());
    }
    if (o.getIgnoreEos() != null) {
      sp.setIgnoreEos(o.getIgnoreEos());
    }
    if (o.getOutputSchema() != null && !o.getOutputSchema().isBlank()) {
      sp.setJsonSchema(o.getOutputSchema());
    }
    return sp.build();
  }
}
