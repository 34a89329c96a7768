package io.xinserve.spring.ai;

import io.micrometer.observation.Observation;
import io.micrometer.observation.ObservationRegistry;
import io.micrometer.observation.contextpropagation.ObservationThreadLocalAccessor;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.InvalidArgumentException;
import io.xinserve.v1.ChatMessage;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.CompletionOutput;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.SamplingParams;
import io.xinserve.v1.Tool;
import io.xinserve.v1.ToolCall;
import io.xinserve.v1.ToolChoice;
import io.xinserve.v1.ToolChoiceMode;
import io.xinserve.v1.Usage;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.messages.MessageType;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.metadata.ChatGenerationMetadata;
import org.springframework.ai.chat.metadata.ChatResponseMetadata;
import org.springframework.ai.chat.metadata.DefaultUsage;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.model.Generation;
import org.springframework.ai.chat.model.MessageAggregator;
import org.springframework.ai.chat.observation.ChatModelObservationContext;
import org.springframework.ai.chat.observation.ChatModelObservationConvention;
import org.springframework.ai.chat.observation.ChatModelObservationDocumentation;
import org.springframework.ai.chat.observation.DefaultChatModelObservationConvention;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.model.tool.ToolCallingManager;
import org.springframework.ai.model.tool.ToolExecutionResult;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.support.UsageCalculator;
import org.springframework.ai.tool.definition.ToolDefinition;
import reactor.core.publisher.Flux;
import reactor.core.scheduler.Schedulers;

/**
 * A Spring AI {@link ChatModel} served by xinserve, over the xinserve SDK's {@code Chat} and
 * {@code ChatStream} calls (the model's own chat template is applied by the server).
 *
 * <ul>
 *   <li>Messages: SYSTEM, USER, ASSISTANT and TOOL map to the roles {@code system}, {@code user},
 *       {@code assistant}, {@code tool}; an assistant message's tool calls become the contract's
 *       {@code tool_calls} (id, name, arguments JSON), and each response of a {@link
 *       ToolResponseMessage} one {@code tool} message with its {@code tool_call_id}.
 *   <li>Options: the prompt's {@link ChatOptions} override this model's defaults field by field,
 *       then map to {@code SamplingParams} as {@link XinserveChatOptions} describes. The model is
 *       the options' model, else the default options' model, else the client's default model.
 *   <li>Tools (Spring AI's {@code ToolCallingChatOptions}: {@code ChatClient}'s {@code
 *       .tools(...)}, {@code .toolCallbacks(...)}, Spring AI 1.1's {@code .toolNames(...)}): their
 *       {@link ToolDefinition}s, resolved by the {@link ToolCallingManager}, become the contract's
 *       {@code tools} (name, description, input schema as {@code parameters_json}); {@link
 *       XinserveChatOptions#getToolChoice()} becomes {@code tool_choice}, {@code auto} when
 *       unset; without tools no {@code tool_choice} is sent (so a default {@code required} leaves
 *       prompts without tools alone). A forced choice ({@code required} or a tool's name) is sent only when the last
 *       message is not a {@link ToolResponseMessage}; after tool results {@code none} is sent, so
 *       the model answers in text. The reply's {@code tool_calls} become the {@link
 *       AssistantMessage}'s tool calls, its text then empty (it is the calls' JSON). On Spring AI
 *       1.1 this model runs the tools with the {@link ToolCallingManager} and sends the results
 *       back until the model answers in text (unless {@code internalToolExecutionEnabled} is
 *       {@code false}: then the tool calls are returned), as Spring AI 1.1's own models do; on
 *       Spring AI 2.0 the tool calls are returned and {@code ChatClient}'s {@code
 *       ToolCallingAdvisor} runs them, as with Spring AI 2.0's own models. A model without a
 *       tool-call parser refuses {@code auto}: a {@link NonTransientAiException} that says to
 *       set {@code toolChoice} to {@code required} or a tool's name; a forced round whose reply
 *       holds no tool call (its JSON cut by {@code maxTokens}) fails with a {@link
 *       NonTransientAiException} too. The tools are never dropped.
 *   <li>Results: one {@link Generation} per completion, its finish reason the contract's name
 *       without prefix ({@code STOP}, {@code LENGTH}, ...); metadata carries the request id (the
 *       key of the call's audit record), the model and token usage (summed over the rounds of a
 *       tool loop).
 *   <li>Streaming: one {@link ChatResponse} per delta; the last carries the finish reason, the
 *       usage and the tool calls. A round with a forced tool choice is one {@link ChatResponse}
 *       (its text is the calls' JSON, never shown). Cancelling the {@code Flux} (dispose, {@code
 *       take}, an HTTP client leaving) cancels the gRPC call, which aborts the engine request on
 *       the server.
 *   <li>Observations: each round trip to the server (each round of a tool loop) is one Spring AI
 *       {@code gen_ai.client.operation} observation ({@link
 *       ChatModelObservationDocumentation#CHAT_MODEL_OPERATION}, {@link
 *       DefaultChatModelObservationConvention} unless one is set), provider {@value #PROVIDER},
 *       as Spring AI's own chat models record it: the request model and options, the response
 *       id, model, finish reasons and token usage (input = prompt tokens, output = completion
 *       tokens), which Spring AI's {@code ChatModelMeterObservationHandler} turns into the {@code
 *       gen_ai.client.token.usage} meter. A stream's observation is stopped before its completion
 *       reaches the subscriber (or on cancel or error), and is the parent of observations made downstream in the same Reactor
 *       context.
 *   <li>Errors: a {@link org.springframework.ai.retry.TransientAiException} (UNAVAILABLE,
 *       RESOURCE_EXHAUSTED) or {@link NonTransientAiException} (anything else), whose cause is the
 *       typed {@link io.xinserve.client.errors.XinserveException}.
 * </ul>
 */
public class XinserveChatModel implements ChatModel {
  /** The provider name in the observations ({@code gen_ai.provider.name} / {@code gen_ai.system}). */
  public static final String PROVIDER = "xinserve";

  private static final ChatModelObservationConvention DEFAULT_OBSERVATION_CONVENTION =
      new DefaultChatModelObservationConvention();

  private final XinserveClient client;
  private final XinserveChatOptions defaults;
  private final ToolCallingManager toolCallingManager;
  private final ObservationRegistry observationRegistry;
  private ChatModelObservationConvention observationConvention = DEFAULT_OBSERVATION_CONVENTION;

  /**
   * @param client the xinserve client to call through
   * @param defaults default options ({@code model} among them), may be {@code null}
   */
  public XinserveChatModel(XinserveClient client, XinserveChatOptions defaults) {
    this(client, defaults, null);
  }

  /**
   * @param client the xinserve client to call through
   * @param defaults default options ({@code model} among them), may be {@code null}
   * @param toolCallingManager resolves tool definitions (and runs tools on Spring AI 1.1); {@code
   *     null} for Spring AI's default ({@code ToolCallingManager.builder().build()})
   */
  public XinserveChatModel(
      XinserveClient client, XinserveChatOptions defaults, ToolCallingManager toolCallingManager) {
    this(client, defaults, toolCallingManager, null);
  }

  /**
   * @param client the xinserve client to call through
   * @param defaults default options ({@code model} among them), may be {@code null}
   * @param toolCallingManager resolves tool definitions (and runs tools on Spring AI 1.1); {@code
   *     null} for Spring AI's default ({@code ToolCallingManager.builder().build()})
   * @param observationRegistry records the {@code gen_ai.client.operation} observations; {@code
   *     null} for {@link ObservationRegistry#NOOP}
   */
  public XinserveChatModel(
      XinserveClient client,
      XinserveChatOptions defaults,
      ToolCallingManager toolCallingManager,
      ObservationRegistry observationRegistry) {
    this.observationRegistry =
        observationRegistry == null ? ObservationRegistry.NOOP : observationRegistry;
    this.client = Objects.requireNonNull(client, "client");
    this.defaults = defaults == null ? new XinserveChatOptions() : defaults.copy();
    this.toolCallingManager =
        toolCallingManager == null ? ToolCallingManager.builder().build() : toolCallingManager;
  }

  /**
   * Sets the convention of this model's observations, as Spring AI's own chat models' {@code
   * setObservationConvention} does.
   *
   * @param observationConvention the convention; {@link DefaultChatModelObservationConvention}
   *     is used for the keys it does not override
   * @throws NullPointerException if {@code observationConvention} is {@code null}
   */
  public void setObservationConvention(ChatModelObservationConvention observationConvention) {
    this.observationConvention = Objects.requireNonNull(observationConvention, "observationConvention");
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
   * Sends the prompt and waits for the reply; on Spring AI 1.1, runs the tool calls of the reply
   * and sends their results back until the model answers in text (see the class description).
   *
   * @param prompt the messages and options
   * @return the reply, one generation per completion
   * @throws org.springframework.ai.retry.NonTransientAiException or {@link
   *     org.springframework.ai.retry.TransientAiException} on failure, caused by the {@link
   *     io.xinserve.client.errors.XinserveException}
   * @throws IllegalArgumentException if no model is known (nothing is sent)
   */
  @Override
  public ChatResponse call(Prompt prompt) {
    return internalCall(merged(prompt), null);
  }

  private Prompt merged(Prompt prompt) {
    return new Prompt(prompt.getInstructions(), defaults.merge(prompt.getOptions()));
  }

  private ChatResponse internalCall(Prompt prompt, ChatResponse previous) {
    ChatRequest request = toRequest(prompt);
    ChatModelObservationContext context =
        ChatObservations.context(observed(prompt, request), PROVIDER, false);
    ChatResponse response =
        ChatModelObservationDocumentation.CHAT_MODEL_OPERATION
            .observation(
                observationConvention, DEFAULT_OBSERVATION_CONVENTION, () -> context, observationRegistry)
            .observe(
                () -> {
                  ChatResponse round = roundTrip(request, previous);
                  context.setResponse(round);
                  return round;
                });
    if (!ToolCallingFields.modelRunsTools(prompt.getOptions(), response)) {
      return response;
    }
    ToolExecutionResult result = toolCallingManager.executeToolCalls(prompt, response);
    if (result.returnDirect()) {
      return ChatResponse.builder()
          .from(response)
          .generations(ToolExecutionResult.buildGenerations(result))
          .build();
    }
    return internalCall(new Prompt(result.conversationHistory(), prompt.getOptions()), response);
  }

  private ChatResponse roundTrip(ChatRequest request, ChatResponse previous) {
    io.xinserve.v1.ChatResponse r;
    try {
      r = client.chat(request);
    } catch (RuntimeException e) {
      throw mapError(e, request);
    }
    List<Generation> generations = new ArrayList<>(r.getOutputsCount());
    for (CompletionOutput out : r.getOutputsList()) {
      requireForcedCalls(request, out.getToolCallsCount(), out.getFinishReason(), r.getRequestId());
      generations.add(
          new Generation(
              assistant(out.getText(), out.getToolCallsList()),
              ChatGenerationMetadata.builder().finishReason(name(out.getFinishReason())).build()));
    }
    return new ChatResponse(generations, metadata(r.getRequestId(), request.getModel(), r.getUsage(), previous));
  }

  /**
   * @return the prompt as the observation records it: its options with the model the request
   *     names (the client's default model when the options name none)
   */
  private static Prompt observed(Prompt prompt, ChatRequest request) {
    XinserveChatOptions options = XinserveChatOptions.from(prompt.getOptions());
    options.setModel(request.getModel());
    return new Prompt(prompt.getInstructions(), options);
  }

  /**
   * Streams the reply: one {@link ChatResponse} per delta; the last one carries the finish reason,
   * the usage and the tool calls (see the class description for tools). Cold: each subscription
   * is one call; cancelling the subscription cancels it.
   *
   * @param prompt the messages and options
   * @return the deltas
   */
  @Override
  public Flux<ChatResponse> stream(Prompt prompt) {
    return Flux.defer(() -> internalStream(merged(prompt), null));
  }

  private Flux<ChatResponse> internalStream(Prompt prompt, ChatResponse previous) {
    return Flux.deferContextual(
        reactorContext -> {
          ChatRequest request = toRequest(prompt);
          ChatModelObservationContext context =
              ChatObservations.context(observed(prompt, request), PROVIDER, true);
          Observation observation =
              ChatModelObservationDocumentation.CHAT_MODEL_OPERATION.observation(
                  observationConvention, DEFAULT_OBSERVATION_CONVENTION, () -> context, observationRegistry);
          observation
              .parentObservation(reactorContext.getOrDefault(ObservationThreadLocalAccessor.KEY, null))
              .start();
          return new MessageAggregator()
              .aggregate(streamRound(prompt, request, previous), context::setResponse)
              .doOnComplete(observation::stop)
              .doOnCancel(observation::stop)
              .doOnError(
                  e -> {
                    observation.error(e);
                    observation.stop();
                  })
              .contextWrite(c -> c.put(ObservationThreadLocalAccessor.KEY, observation));
        });
  }

  private Flux<ChatResponse> streamRound(Prompt prompt, ChatRequest request, ChatResponse previous) {
    Flux<ChatStreamResponse> deltas = client.reactor().chatStream(request);
    Flux<ChatResponse> round;
    if (forced(request)) {
      round =
          deltas
              .collectList()
              .map(
                  all -> {
                    ChatStreamResponse d = concatenated(all);
                    requireForcedCalls(request, d.getToolCallsCount(), d.getFinishReason(), d.getRequestId());
                    return toChunk(d, request.getModel(), previous);
                  })
              .flux();
    } else {
      round = deltas.map(d -> toChunk(d, request.getModel(), previous));
    }
    return round
        .onErrorMap(e -> mapError(e, request))
        .concatMap(
            response -> {
              if (!ToolCallingFields.modelRunsTools(prompt.getOptions(), response)) {
                return Flux.just(response);
              }
              return Flux.defer(
                      () -> {
                        ToolExecutionResult result = toolCallingManager.executeToolCalls(prompt, response);
                        if (result.returnDirect()) {
                          return Flux.just(
                              ChatResponse.builder()
                                  .from(response)
                                  .generations(ToolExecutionResult.buildGenerations(result))
                                  .build());
                        }
                        return internalStream(
                            new Prompt(result.conversationHistory(), prompt.getOptions()), response);
                      })
                  .subscribeOn(Schedulers.boundedElastic());
            });
  }

  private static boolean forced(ChatRequest request) {
    return request.hasToolChoice()
        && (request.getToolChoice().hasFunctionName()
            || request.getToolChoice().getMode() == ToolChoiceMode.TOOL_CHOICE_MODE_REQUIRED);
  }

  /**
   * @throws NonTransientAiException if a forced tool choice's reply holds no tool call (its JSON
   *     was cut, by {@code max_tokens} or a stop string): never returned as the answer
   */
  private static void requireForcedCalls(ChatRequest request, int calls, FinishReason finish, String requestId) {
    if (calls > 0 || !forced(request)) {
      return;
    }
    throw new NonTransientAiException(
        "xinserve call failed: tool_choice "
            + (request.getToolChoice().hasFunctionName()
                ? "\"" + request.getToolChoice().getFunctionName() + "\""
                : "\"required\"")
            + " forced a tool call, but the reply holds none (finish reason "
            + name(finish)
            + ": the call's JSON was cut); raise maxTokens (request id "
            + requestId
            + ")");
  }

  private static ChatStreamResponse concatenated(List<ChatStreamResponse> deltas) {
    if (deltas.isEmpty()) {
      return ChatStreamResponse.getDefaultInstance();
    }
    StringBuilder text = new StringBuilder();
    for (ChatStreamResponse d : deltas) {
      text.append(d.getText());
    }
    return deltas.get(deltas.size() - 1).toBuilder().setText(text.toString()).build();
  }

  private ChatResponse toChunk(ChatStreamResponse d, String model, ChatResponse previous) {
    ChatGenerationMetadata md =
        d.getFinishReason() == FinishReason.FINISH_REASON_UNSPECIFIED
            ? ChatGenerationMetadata.NULL
            : ChatGenerationMetadata.builder().finishReason(name(d.getFinishReason())).build();
    return new ChatResponse(
        List.of(new Generation(assistant(d.getText(), d.getToolCallsList()), md)),
        metadata(d.getRequestId(), model, d.hasUsage() ? d.getUsage() : null, previous));
  }

  private static AssistantMessage assistant(String text, List<ToolCall> calls) {
    if (calls.isEmpty()) {
      return new AssistantMessage(text);
    }
    List<AssistantMessage.ToolCall> toolCalls = new ArrayList<>(calls.size());
    for (ToolCall c : calls) {
      toolCalls.add(new AssistantMessage.ToolCall(c.getId(), "function", c.getName(), c.getArguments()));
    }
    return AssistantMessage.builder().content("").toolCalls(toolCalls).build();
  }

  private static ChatResponseMetadata metadata(
      String requestId, String model, Usage usage, ChatResponse previous) {
    ChatResponseMetadata.Builder b = ChatResponseMetadata.builder().id(requestId).model(model);
    if (usage != null) {
      org.springframework.ai.chat.metadata.Usage current =
          new DefaultUsage(usage.getPromptTokens(), usage.getCompletionTokens(), null, usage);
      b.usage(previous == null ? current : UsageCalculator.getCumulativeUsage(current, previous));
    }
    return b.build();
  }

  private static RuntimeException mapError(Throwable e, ChatRequest request) {
    RuntimeException mapped = XinserveAiErrors.map(e);
    if (mapped.getCause() instanceof InvalidArgumentException invalid
        && request.hasToolChoice()
        && request.getToolChoice().getMode() == ToolChoiceMode.TOOL_CHOICE_MODE_AUTO
        && invalid.fieldViolation("tool_choice").isPresent()) {
      return new NonTransientAiException(
          mapped.getMessage()
              + ": the model "
              + request.getModel()
              + " cannot choose tools itself (tool_choice auto needs its tool-call parser,"
              + " models[].tool_call_parser); set XinserveChatOptions toolChoice(\"required\") or"
              + " toolChoice(\"<tool name>\") to make it call one",
          invalid);
    }
    return mapped;
  }

  static String name(FinishReason r) {
    String n = r.name();
    return n.startsWith("FINISH_REASON_") ? n.substring("FINISH_REASON_".length()) : n;
  }

  /**
   * @param prompt the Spring AI prompt, its options merged with this model's defaults or not
   * @return the contract's request for it
   * @throws IllegalArgumentException if no model is known (options, defaults or the client's)
   */
  ChatRequest toRequest(Prompt prompt) {
    XinserveChatOptions o = defaults.merge(prompt.getOptions());
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
    List<Message> messages = prompt.getInstructions();
    for (Message m : messages) {
      addMessage(b, m);
    }
    List<ToolDefinition> tools = toolCallingManager.resolveToolDefinitions(o);
    for (ToolDefinition t : tools) {
      b.addTools(
          Tool.newBuilder()
              .setName(t.name())
              .setDescription(t.description() == null ? "" : t.description())
              .setParametersJson(t.inputSchema() == null ? "" : t.inputSchema()));
    }
    if (!tools.isEmpty()) {
      String choice = o.getToolChoice() == null ? null : o.getToolChoice().strip();
      boolean afterToolResults =
          !messages.isEmpty() && messages.get(messages.size() - 1).getMessageType() == MessageType.TOOL;
      b.setToolChoice(toolChoice(choice, afterToolResults));
      if (o.getParallelToolCalls() != null) {
        b.setParallelToolCalls(o.getParallelToolCalls());
      }
    }
    b.setSamplingParams(sampling(o));
    return b.build();
  }

  private static ToolChoice toolChoice(String choice, boolean afterToolResults) {
    ToolChoice.Builder c = ToolChoice.newBuilder();
    if (choice == null || choice.equals("auto")) {
      return c.setMode(ToolChoiceMode.TOOL_CHOICE_MODE_AUTO).build();
    }
    if (choice.equals("none") || afterToolResults) {
      return c.setMode(ToolChoiceMode.TOOL_CHOICE_MODE_NONE).build();
    }
    if (choice.equals("required")) {
      return c.setMode(ToolChoiceMode.TOOL_CHOICE_MODE_REQUIRED).build();
    }
    return c.setFunctionName(choice).build();
  }

  private static void addMessage(ChatRequest.Builder b, Message m) {
    String role = m.getMessageType().name().toLowerCase(Locale.ROOT);
    if (m instanceof ToolResponseMessage tool) {
      for (ToolResponseMessage.ToolResponse r : tool.getResponses()) {
        ChatMessage.Builder t =
            ChatMessage.newBuilder()
                .setRole("tool")
                .setContent(r.responseData() == null ? "" : r.responseData());
        if (r.id() != null) {
          t.setToolCallId(r.id());
        }
        b.addMessages(t);
      }
      return;
    }
    ChatMessage.Builder cm =
        ChatMessage.newBuilder().setRole(role).setContent(m.getText() == null ? "" : m.getText());
    if (m instanceof AssistantMessage a && a.getToolCalls() != null) {
      for (AssistantMessage.ToolCall c : a.getToolCalls()) {
        cm.addToolCalls(
            ToolCall.newBuilder()
                .setId(c.id() == null ? "" : c.id())
                .setName(c.name())
                .setArguments(c.arguments() == null ? "" : c.arguments()));
      }
    }
    b.addMessages(cm);
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
