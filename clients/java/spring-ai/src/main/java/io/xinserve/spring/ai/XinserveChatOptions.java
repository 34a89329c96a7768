package io.xinserve.spring.ai;

import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.model.tool.StructuredOutputChatOptions;
import org.springframework.ai.model.tool.ToolCallingChatOptions;
import org.springframework.ai.tool.ToolCallback;

/**
 * Spring AI chat options of an xinserve model, mapped one to one onto the contract's {@code
 * SamplingParams} (vLLM's names): {@code temperature}, {@code top_p}, {@code top_k}, {@code
 * max_tokens}, {@code stop}, {@code presence_penalty}, {@code frequency_penalty}, {@code
 * repetition_penalty}, {@code seed}, {@code ignore_eos}; Spring AI's native structured output ({@link
 * #getOutputSchema()}) becomes {@code json_schema}. {@code null} leaves the model's default.
 *
 * <p>These are Spring AI {@link ToolCallingChatOptions}: tools given to {@code ChatClient} ({@code
 * .tools(...)}, {@code .toolCallbacks(...)}, {@code .toolNames(...)} on Spring AI 1.1) reach
 * {@link XinserveChatModel}, which offers them to the model as the contract's {@code tools};
 * {@link #getToolChoice()} and {@link #getParallelToolCalls()} are the contract's {@code
 * tool_choice} and {@code parallel_tool_calls}.
 *
 * <p>One source for both Spring AI generations: {@code xinserve-spring-ai} compiles it against
 * Spring AI 1.1 ({@link #copy()} implements {@code ChatOptions.copy()}), {@code
 * xinserve-spring-ai-boot4} against Spring AI 2.0 ({@link #mutate()} implements {@code
 * ChatOptions.mutate()}, and {@link Builder} is a {@code StructuredOutputChatOptions.Builder}
 * through {@code ChatOptionsBuilderContract}, the one type each module defines for itself).
 */
public class XinserveChatOptions implements StructuredOutputChatOptions, ToolCallingChatOptions {
  private String model;
  private Double temperature;
  private Double topP;
  private Integer topK;
  private Integer maxTokens;
  private List<String> stopSequences;
  private Double presencePenalty;
  private Double frequencyPenalty;
  private Double repetitionPenalty;
  private Long seed;
  private Boolean ignoreEos;
  private String outputSchema;
  private List<ToolCallback> toolCallbacks = List.of();
  private Set<String> toolNames = Set.of();
  private Boolean internalToolExecutionEnabled;
  private Map<String, Object> toolContext = Map.of();
  private String toolChoice;
  private Boolean parallelToolCalls;

  /** @return a builder of options */
  public static Builder builder() {
    return new Builder();
  }

  /**
   * Copies the portable fields of any Spring AI {@link ChatOptions} (and the xinserve ones when
   * {@code options} is an {@code XinserveChatOptions}).
   *
   * @param options the options, may be {@code null}
   * @return the copy (empty if {@code options} is {@code null})
   */
  public static XinserveChatOptions from(ChatOptions options) {
    XinserveChatOptions o = new XinserveChatOptions();
    if (options == null) {
      return o;
    }
    o.model = options.getModel();
    o.temperature = options.getTemperature();
    o.topP = options.getTopP();
    o.topK = options.getTopK();
    o.maxTokens = options.getMaxTokens();
    o.stopSequences = options.getStopSequences() == null ? null : List.copyOf(options.getStopSequences());
    o.presencePenalty = options.getPresencePenalty();
    o.frequencyPenalty = options.getFrequencyPenalty();
    if (options instanceof XinserveChatOptions x) {
      o.repetitionPenalty = x.repetitionPenalty;
      o.seed = x.seed;
      o.ignoreEos = x.ignoreEos;
      o.outputSchema = x.outputSchema;
      o.toolNames = x.toolNames;
      o.internalToolExecutionEnabled = x.internalToolExecutionEnabled;
      o.toolChoice = x.toolChoice;
      o.parallelToolCalls = x.parallelToolCalls;
    } else {
      if (options instanceof StructuredOutputChatOptions s) {
        o.outputSchema = s.getOutputSchema();
      }
      if (options instanceof ToolCallingChatOptions t) {
        o.toolNames = ToolCallingFields.toolNames(t);
        o.internalToolExecutionEnabled = ToolCallingFields.internalToolExecutionEnabled(t);
      }
    }
    if (options instanceof ToolCallingChatOptions t) {
      o.toolCallbacks = t.getToolCallbacks() == null ? List.of() : List.copyOf(t.getToolCallbacks());
      o.toolContext = t.getToolContext() == null ? Map.of() : Map.copyOf(t.getToolContext());
    }
    return o;
  }

  /**
   * @param overrides options whose non-{@code null} fields win, may be {@code null}
   * @return a new options object: these options overridden field by field
   */
  public XinserveChatOptions merge(ChatOptions overrides) {
    XinserveChatOptions o = copy();
    if (overrides == null) {
      return o;
    }
    XinserveChatOptions x = from(overrides);
    o.model = x.model != null ? x.model : o.model;
    o.temperature = x.temperature != null ? x.temperature : o.temperature;
    o.topP = x.topP != null ? x.topP : o.topP;
    o.topK = x.topK != null ? x.topK : o.topK;
    o.maxTokens = x.maxTokens != null ? x.maxTokens : o.maxTokens;
    o.stopSequences = x.stopSequences != null ? x.stopSequences : o.stopSequences;
    o.presencePenalty = x.presencePenalty != null ? x.presencePenalty : o.presencePenalty;
    o.frequencyPenalty = x.frequencyPenalty != null ? x.frequencyPenalty : o.frequencyPenalty;
    o.repetitionPenalty = x.repetitionPenalty != null ? x.repetitionPenalty : o.repetitionPenalty;
    o.seed = x.seed != null ? x.seed : o.seed;
    o.ignoreEos = x.ignoreEos != null ? x.ignoreEos : o.ignoreEos;
    o.outputSchema = x.outputSchema != null ? x.outputSchema : o.outputSchema;
    o.toolCallbacks = !x.toolCallbacks.isEmpty() ? x.toolCallbacks : o.toolCallbacks;
    o.toolNames = !x.toolNames.isEmpty() ? x.toolNames : o.toolNames;
    o.internalToolExecutionEnabled =
        x.internalToolExecutionEnabled != null ? x.internalToolExecutionEnabled : o.internalToolExecutionEnabled;
    o.toolChoice = x.toolChoice != null ? x.toolChoice : o.toolChoice;
    o.parallelToolCalls = x.parallelToolCalls != null ? x.parallelToolCalls : o.parallelToolCalls;
    if (!x.toolContext.isEmpty()) {
      Map<String, Object> context = new HashMap<>(o.toolContext);
      context.putAll(x.toolContext);
      o.toolContext = Map.copyOf(context);
    }
    return o;
  }

  @Override
  public String getModel() {
    return model;
  }

  /** @param model the served model name */
  public void setModel(String model) {
    this.model = model;
  }

  @Override
  public Double getTemperature() {
    return temperature;
  }

  /** @param temperature sampling temperature, >= 0 */
  public void setTemperature(Double temperature) {
    this.temperature = temperature;
  }

  @Override
  public Double getTopP() {
    return topP;
  }

  /** @param topP nucleus sampling mass, in (0, 1] */
  public void setTopP(Double topP) {
    this.topP = topP;
  }

  @Override
  public Integer getTopK() {
    return topK;
  }

  /** @param topK top-k sampling; -1 or 0 for all */
  public void setTopK(Integer topK) {
    this.topK = topK;
  }

  @Override
  public Integer getMaxTokens() {
    return maxTokens;
  }

  /** @param maxTokens most tokens to generate */
  public void setMaxTokens(Integer maxTokens) {
    this.maxTokens = maxTokens;
  }

  @Override
  public List<String> getStopSequences() {
    return stopSequences;
  }

  /** @param stopSequences strings that end the reply */
  public void setStopSequences(List<String> stopSequences) {
    this.stopSequences = stopSequences;
  }

  @Override
  public Double getPresencePenalty() {
    return presencePenalty;
  }

  /** @param presencePenalty presence penalty, in [-2, 2] */
  public void setPresencePenalty(Double presencePenalty) {
    this.presencePenalty = presencePenalty;
  }

  @Override
  public Double getFrequencyPenalty() {
    return frequencyPenalty;
  }

  /** @param frequencyPenalty frequency penalty, in [-2, 2] */
  public void setFrequencyPenalty(Double frequencyPenalty) {
    this.frequencyPenalty = frequencyPenalty;
  }

  /** @return vLLM's repetition penalty (1 is none) */
  public Double getRepetitionPenalty() {
    return repetitionPenalty;
  }

  /** @param repetitionPenalty vLLM's repetition penalty, > 0 */
  public void setRepetitionPenalty(Double repetitionPenalty) {
    this.repetitionPenalty = repetitionPenalty;
  }

  /** @return the random seed */
  public Long getSeed() {
    return seed;
  }

  /** @param seed the random seed; the same seed gives the same output */
  public void setSeed(Long seed) {
    this.seed = seed;
  }

  /** @return whether to keep generating after the end-of-sequence token */
  public Boolean getIgnoreEos() {
    return ignoreEos;
  }

  /** @param ignoreEos keep generating after the end-of-sequence token (until max tokens) */
  public void setIgnoreEos(Boolean ignoreEos) {
    this.ignoreEos = ignoreEos;
  }

  /** @return the JSON Schema the reply must satisfy ({@code json_schema}), or {@code null} */
  @Override
  public String getOutputSchema() {
    return outputSchema;
  }

  /** @param outputSchema a JSON Schema as JSON text */
  public void setOutputSchema(String outputSchema) {
    this.outputSchema = outputSchema;
  }

  /** @return the tool callbacks (Spring AI's {@code ToolCallingChatOptions}); empty if none */
  @Override
  public List<ToolCallback> getToolCallbacks() {
    return toolCallbacks;
  }

  /** @param toolCallbacks the tools offered to the model, {@code null} for none */
  public void setToolCallbacks(List<ToolCallback> toolCallbacks) {
    this.toolCallbacks = toolCallbacks == null ? List.of() : List.copyOf(toolCallbacks);
  }

  /** @return the names of tools to resolve (Spring AI 1.1's {@code toolNames}); empty if none */
  public Set<String> getToolNames() {
    return toolNames;
  }

  /** @param toolNames names of tools to resolve, {@code null} for none */
  public void setToolNames(Set<String> toolNames) {
    this.toolNames = toolNames == null ? Set.of() : Set.copyOf(toolNames);
  }

  /** @return whether Spring AI runs the tools itself (Spring AI 1.1), {@code null} for its default */
  public Boolean getInternalToolExecutionEnabled() {
    return internalToolExecutionEnabled;
  }

  /** @param internalToolExecutionEnabled whether Spring AI runs the tools itself */
  public void setInternalToolExecutionEnabled(Boolean internalToolExecutionEnabled) {
    this.internalToolExecutionEnabled = internalToolExecutionEnabled;
  }

  /** @return the tool context (passed to tools, never to the model); empty if none */
  @Override
  public Map<String, Object> getToolContext() {
    return toolContext;
  }

  /** @param toolContext the tool context, {@code null} for none */
  public void setToolContext(Map<String, Object> toolContext) {
    this.toolContext = toolContext == null ? Map.of() : Map.copyOf(toolContext);
  }

  /**
   * @return the contract's {@code tool_choice} (OpenAI's): {@code "none"}, {@code "auto"}, {@code
   *     "required"} or the name of one offered tool; {@code null} for {@code "auto"} when tools
   *     are offered
   */
  public String getToolChoice() {
    return toolChoice;
  }

  /**
   * @param toolChoice {@code "none"} (answer in text), {@code "auto"} (the model decides; the
   *     server refuses it with INVALID_ARGUMENT naming {@code tool_choice} unless the model has a
   *     tool-call parser, {@code models[].tool_call_parser}), {@code "required"} (at least one
   *     call, forced by structured output, so any model can) or a tool's name (that tool, forced
   *     likewise); {@code null} for {@code "auto"}. Applies only to a prompt that offers tools.
   *     A forced choice applies to the round that
   *     follows the user's message; the round after tool results is sent with {@code "none"}, so
   *     the model answers in text.
   */
  public void setToolChoice(String toolChoice) {
    this.toolChoice = toolChoice;
  }

  /** @return the contract's {@code parallel_tool_calls}, {@code null} for the server's default */
  public Boolean getParallelToolCalls() {
    return parallelToolCalls;
  }

  /**
   * @param parallelToolCalls {@code false} limits a {@code "required"} reply to one tool call;
   *     {@code null} for the server's default ({@code true})
   */
  public void setParallelToolCalls(Boolean parallelToolCalls) {
    this.parallelToolCalls = parallelToolCalls;
  }

  /** @return an independent copy of these options (Spring AI 1.1's {@code ChatOptions.copy()}) */
  @SuppressWarnings("unchecked")
  public XinserveChatOptions copy() {
    return from(this);
  }

  /**
   * @return a builder starting from these options (Spring AI 2.0's {@code ChatOptions.mutate()})
   */
  public Builder mutate() {
    Builder b = new Builder();
    b.o.copyFrom(this);
    return b;
  }

  private void copyFrom(XinserveChatOptions x) {
    model = x.model;
    temperature = x.temperature;
    topP = x.topP;
    topK = x.topK;
    maxTokens = x.maxTokens;
    stopSequences = x.stopSequences;
    presencePenalty = x.presencePenalty;
    frequencyPenalty = x.frequencyPenalty;
    repetitionPenalty = x.repetitionPenalty;
    seed = x.seed;
    ignoreEos = x.ignoreEos;
    outputSchema = x.outputSchema;
    toolCallbacks = x.toolCallbacks;
    toolNames = x.toolNames;
    internalToolExecutionEnabled = x.internalToolExecutionEnabled;
    toolContext = x.toolContext;
    toolChoice = x.toolChoice;
    parallelToolCalls = x.parallelToolCalls;
  }

  @Override
  public boolean equals(Object other) {
    if (!(other instanceof XinserveChatOptions o)) {
      return false;
    }
    return Objects.equals(model, o.model)
        && Objects.equals(temperature, o.temperature)
        && Objects.equals(topP, o.topP)
        && Objects.equals(topK, o.topK)
        && Objects.equals(maxTokens, o.maxTokens)
        && Objects.equals(stopSequences, o.stopSequences)
        && Objects.equals(presencePenalty, o.presencePenalty)
        && Objects.equals(frequencyPenalty, o.frequencyPenalty)
        && Objects.equals(repetitionPenalty, o.repetitionPenalty)
        && Objects.equals(seed, o.seed)
        && Objects.equals(ignoreEos, o.ignoreEos)
        && Objects.equals(outputSchema, o.outputSchema)
        && Objects.equals(toolCallbacks, o.toolCallbacks)
        && Objects.equals(toolNames, o.toolNames)
        && Objects.equals(internalToolExecutionEnabled, o.internalToolExecutionEnabled)
        && Objects.equals(toolContext, o.toolContext)
        && Objects.equals(toolChoice, o.toolChoice)
        && Objects.equals(parallelToolCalls, o.parallelToolCalls);
  }

  @Override
  public int hashCode() {
    return Objects.hash(
        model, temperature, topP, topK, maxTokens, stopSequences, presencePenalty, frequencyPenalty,
        repetitionPenalty, seed, ignoreEos, outputSchema, toolCallbacks, toolNames, toolContext,
        toolChoice, parallelToolCalls);
  }

  /**
   * Builds {@link XinserveChatOptions}; on Spring AI 2.0 a {@code
   * StructuredOutputChatOptions.Builder} (with {@code combineWith} from {@code
   * ChatOptionsBuilderContract}).
   */
  public static final class Builder implements ChatOptionsBuilderContract {
    private XinserveChatOptions o = new XinserveChatOptions();

    private Builder() {}

    /** @return an independent builder with the same fields */
    @Override
    public Builder clone() {
      Builder b = new Builder();
      b.o = o.copy();
      return b;
    }

    /**
     * @param overrides options whose non-{@code null} fields win over this builder's
     * @return this builder
     */
    Builder mergeFrom(ChatOptions overrides) {
      o = o.merge(overrides);
      return this;
    }

    /** @param v the model @return this builder */
    public Builder model(String v) {
      o.model = v;
      return this;
    }

    /** @param v the temperature @return this builder */
    public Builder temperature(Double v) {
      o.temperature = v;
      return this;
    }

    /** @param v top_p @return this builder */
    public Builder topP(Double v) {
      o.topP = v;
      return this;
    }

    /** @param v top_k @return this builder */
    public Builder topK(Integer v) {
      o.topK = v;
      return this;
    }

    /** @param v max_tokens @return this builder */
    public Builder maxTokens(Integer v) {
      o.maxTokens = v;
      return this;
    }

    /** @param v stop strings @return this builder */
    public Builder stopSequences(List<String> v) {
      o.stopSequences = v;
      return this;
    }

    /** @param v presence penalty @return this builder */
    public Builder presencePenalty(Double v) {
      o.presencePenalty = v;
      return this;
    }

    /** @param v frequency penalty @return this builder */
    public Builder frequencyPenalty(Double v) {
      o.frequencyPenalty = v;
      return this;
    }

    /** @param v repetition penalty @return this builder */
    public Builder repetitionPenalty(Double v) {
      o.repetitionPenalty = v;
      return this;
    }

    /** @param v seed @return this builder */
    public Builder seed(Long v) {
      o.seed = v;
      return this;
    }

    /** @param v ignore_eos @return this builder */
    public Builder ignoreEos(Boolean v) {
      o.ignoreEos = v;
      return this;
    }

    /** @param v JSON Schema text @return this builder */
    public Builder outputSchema(String v) {
      o.outputSchema = v;
      return this;
    }

    /** @param v the tools offered to the model @return this builder */
    public Builder toolCallbacks(List<ToolCallback> v) {
      o.setToolCallbacks(v);
      return this;
    }

    /** @param v the tools offered to the model @return this builder */
    public Builder toolCallbacks(ToolCallback... v) {
      o.setToolCallbacks(Arrays.asList(v));
      return this;
    }

    /** @param v names of tools to resolve (Spring AI 1.1) @return this builder */
    public Builder toolNames(Set<String> v) {
      o.setToolNames(v);
      return this;
    }

    /** @param v whether Spring AI runs the tools itself (Spring AI 1.1) @return this builder */
    public Builder internalToolExecutionEnabled(Boolean v) {
      o.internalToolExecutionEnabled = v;
      return this;
    }

    /** @param v the tool context, replacing any @return this builder */
    public Builder toolContext(Map<String, Object> v) {
      o.setToolContext(v);
      return this;
    }

    /** @param key a tool context key @param value its value @return this builder */
    public Builder toolContext(String key, Object value) {
      Map<String, Object> context = new HashMap<>(o.toolContext);
      context.put(Objects.requireNonNull(key, "key"), Objects.requireNonNull(value, "value"));
      o.toolContext = Map.copyOf(context);
      return this;
    }

    /**
     * @param v {@code "none"}, {@code "auto"}, {@code "required"} or a tool's name ({@link
     *     XinserveChatOptions#setToolChoice}) @return this builder
     */
    public Builder toolChoice(String v) {
      o.toolChoice = v;
      return this;
    }

    /** @param v parallel_tool_calls @return this builder */
    public Builder parallelToolCalls(Boolean v) {
      o.parallelToolCalls = v;
      return this;
    }

    /** @return the options */
    public XinserveChatOptions build() {
      return o.copy();
    }
  }
}
