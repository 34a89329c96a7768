package io.xinserve.client;

import io.grpc.Channel;
import io.grpc.ClientInterceptor;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.stub.ClientCalls;
import io.xinserve.client.errors.ErrorDetails;
import io.xinserve.client.errors.IncompatibleServerException;
import io.xinserve.client.errors.XinserveException;
import io.xinserve.client.errors.XinserveExceptions;
import io.xinserve.v1.AbortRequest;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatResponse;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.DetokenizeRequest;
import io.xinserve.v1.DetokenizeResponse;
import io.xinserve.v1.EmbedRequest;
import io.xinserve.v1.EmbedResponse;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.GetLoadRequest;
import io.xinserve.v1.GetLoadResponse;
import io.xinserve.v1.GetModelRequest;
import io.xinserve.v1.GetServerInfoRequest;
import io.xinserve.v1.GetServerInfoResponse;
import io.xinserve.v1.InferenceServiceGrpc;
import io.xinserve.v1.ListModelsRequest;
import io.xinserve.v1.Model;
import io.xinserve.v1.ModelServiceGrpc;
import io.xinserve.v1.SamplingParams;
import io.xinserve.v1.ServerServiceGrpc;
import io.xinserve.v1.TokenizeRequest;
import io.xinserve.v1.TokenizeResponse;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;
import java.util.function.Supplier;
import javax.net.ssl.KeyManager;
import javax.net.ssl.TrustManager;

/**
 * Client of an xinserve server: text generation, chat, embeddings, tokenization, model and server
 * information.
 *
 * <pre>{@code
 * try (XinserveClient client = XinserveClient.builder()
 *         .target("dns:///xinserve.internal:50051")
 *         .trustCertificates(Path.of("ca.pem"))
 *         .bearerToken(() -> tokenService.currentToken())
 *         .build()) {
 *   GenerateResponse r = client.generate(GenerateRequest.newBuilder()
 *       .setModel("qwen2.5-7b").setPrompt("你好").build());
 * }
 * }</pre>
 *
 * <p>Every call comes in up to four forms: blocking ({@link #generate}), {@link
 * CompletableFuture} ({@link #generateAsync}; cancelling the future cancels the call), a closeable
 * blocking iterator for streams ({@link #generateStream(GenerateRequest)}) and a callback form
 * ({@link #generateStream(GenerateRequest, StreamListener)}). {@link #reactor()} adds Reactor
 * {@code Flux}/{@code Mono} forms when reactor-core is on the class path.
 *
 * <p>Failures are thrown as subclasses of {@link XinserveException}, chosen by the gRPC status
 * code, with the server's {@code google.rpc} details decoded (field violations, retry delay).
 *
 * <p>Unary calls get the builder's unary deadline (default 30 s) and streams the stream deadline
 * (default none, so long generations are not cut); {@link #withDeadline} overrides both. Every call
 * carries an {@code x-request-id} header: the request's {@code request_id} if set, otherwise a
 * random UUID.
 *
 * <p>Thread-safe; create one per server and share it. {@link #close()} shuts the channel down.
 */
public final class XinserveClient implements AutoCloseable {
  /**
   * The {@code xinserve.v1} contract revision this client implements, compared with {@code
   * GetServerInfoResponse.min_client_revision} by {@link #checkCompatibility()}; the same number
   * as the Python client's {@code SCHEMA_REVISION} and the server's {@code schema_revision}.
   */
  public static final int SCHEMA_REVISION = 4;

  private final ManagedChannel ownedChannel;
  private final Calls calls;
  private final String defaultModel;
  private final String defaultEmbeddingModel;
  private final String target;
  private final ManagedChannel stateChannel;

  private XinserveClient(
      ManagedChannel ownedChannel,
      Calls calls,
      String defaultModel,
      String defaultEmbeddingModel,
      String target,
      ManagedChannel stateChannel) {
    this.ownedChannel = ownedChannel;
    this.calls = calls;
    this.defaultModel = defaultModel;
    this.defaultEmbeddingModel = defaultEmbeddingModel;
    this.target = target;
    this.stateChannel = stateChannel;
  }

  /** @return a new builder; at least {@link Builder#target} (or a channel) must be set */
  public static Builder builder() {
    return new Builder();
  }

  /**
   * A view of this client whose calls all use the given deadline (unary and streams). It shares the
   * channel; closing the view does nothing.
   *
   * @param deadline the deadline measured from the start of each call; {@link Duration#ZERO} for
   *     none
   * @return the view
   */
  public XinserveClient withDeadline(Duration deadline) {
    Objects.requireNonNull(deadline, "deadline");
    return new XinserveClient(
        null, calls.withDeadline(deadline), defaultModel, defaultEmbeddingModel, target, stateChannel);
  }

  /**
   * @return the generative model used when a request names none ({@link Builder#defaultModel}),
   *     or empty
   */
  public java.util.Optional<String> defaultModel() {
    return java.util.Optional.ofNullable(defaultModel);
  }

  /**
   * @return the embedding model used when a request names none ({@link
   *     Builder#defaultEmbeddingModel}), or empty
   */
  public java.util.Optional<String> defaultEmbeddingModel() {
    return java.util.Optional.ofNullable(defaultEmbeddingModel);
  }

  /** @return the target this client calls (as given to the builder), or {@code "channel"} */
  public String target() {
    return target;
  }

  /**
   * The connectivity state of the client's channel (gRPC {@code ManagedChannel#getState}).
   *
   * @param requestConnection whether to start connecting if the channel is idle
   * @return the state; {@code READY} when the channel is unknown (a caller's plain {@link Channel})
   */
  public io.grpc.ConnectivityState connectivityState(boolean requestConnection) {
    return stateChannel == null
        ? io.grpc.ConnectivityState.READY
        : stateChannel.getState(requestConnection);
  }

  // ---------------------------------------------------------------- text shortcuts

  /**
   * Generates a whole completion of a prompt with the default model: until the model's
   * end-of-sequence token or the end of its context. A {@code Tokenize} call first measures the
   * prompt, and {@code max_tokens} is set to the context left after it ({@code max_model_len}
   * minus the prompt's tokens); the other sampling parameters are the model's defaults. (A {@code
   * GenerateRequest} without {@code max_tokens} gets the server's completions default, 16 tokens,
   * as vLLM's {@code /v1/completions}.)
   *
   * @param prompt the prompt
   * @return the text of the first completion
   * @throws IllegalStateException if no {@link Builder#defaultModel} is set
   * @throws XinserveException on failure, as for {@link #tokenize} and {@link #generate}
   */
  public String generateText(String prompt) {
    return generate(wholeCompletion(prompt)).getOutputs(0).getText();
  }

  /**
   * Streams a whole completion of a prompt with the default model as text pieces, until the
   * end-of-sequence token or the end of the context ({@code max_tokens} as in {@link
   * #generateText}). Close the returned {@link java.util.stream.Stream} (try-with-resources) to
   * cancel the call early.
   *
   * @param prompt the prompt
   * @return the text deltas, in order
   * @throws IllegalStateException if no {@link Builder#defaultModel} is set
   */
  public java.util.stream.Stream<String> streamText(String prompt) {
    return generateStream(wholeCompletion(prompt))
        .stream()
        .map(GenerateStreamResponse::getText)
        .filter(t -> !t.isEmpty());
  }

  /**
   * @param prompt a prompt for the default model
   * @return a request whose {@code max_tokens} is the context left after the prompt (measured
   *     with {@code Tokenize}); without {@code max_tokens} when nothing is left, so that the
   *     server refuses the prompt with its own message
   */
  GenerateRequest wholeCompletion(String prompt) {
    String model = requireModel();
    TokenizeResponse t = tokenize(TokenizeRequest.newBuilder().setModel(model).setText(prompt).build());
    GenerateRequest.Builder b = GenerateRequest.newBuilder().setModel(model).setPrompt(prompt);
    long room = (long) t.getMaxModelLen() - t.getTokenIdsCount();
    if (room >= 1) {
      b.setSamplingParams(SamplingParams.newBuilder().setMaxTokens((int) Math.min(room, Integer.MAX_VALUE)));
    }
    return b.build();
  }

  /**
   * One chat turn with the default model: a system and a user message, through the model's chat
   * template. {@code max_tokens} is left unset, which the server's chat default runs until the
   * end-of-sequence token or the end of the context, so the reply is whole.
   *
   * @param system the system message, or {@code null}/empty for none
   * @param user the user message
   * @return the assistant's reply
   * @throws IllegalStateException if no {@link Builder#defaultModel} is set
   * @throws XinserveException on failure, as for {@link #chat(ChatRequest)}
   */
  public String chat(String system, String user) {
    ChatRequest.Builder b = ChatRequest.newBuilder().setModel(requireModel());
    if (system != null && !system.isEmpty()) {
      b.addMessages(io.xinserve.v1.ChatMessage.newBuilder().setRole("system").setContent(system));
    }
    b.addMessages(io.xinserve.v1.ChatMessage.newBuilder().setRole("user").setContent(user));
    return chat(b.build()).getOutputs(0).getText();
  }

  /**
   * Embeds texts with the default embedding model.
   *
   * @param inputs the texts
   * @return the vectors, one per input, in input order
   * @throws IllegalStateException if no {@link Builder#defaultEmbeddingModel} is set
   */
  public List<float[]> embed(List<String> inputs) {
    if (defaultEmbeddingModel == null) {
      throw new IllegalStateException("no default embedding model: set Builder.defaultEmbeddingModel");
    }
    return embed(defaultEmbeddingModel, inputs);
  }

  String requireModel() {
    if (defaultModel == null) {
      throw new IllegalStateException("no default model: set Builder.defaultModel");
    }
    return defaultModel;
  }

  GenerateRequest withModel(GenerateRequest r) {
    return r.getModel().isEmpty() && defaultModel != null ? r.toBuilder().setModel(defaultModel).build() : r;
  }

  ChatRequest withModel(ChatRequest r) {
    return r.getModel().isEmpty() && defaultModel != null ? r.toBuilder().setModel(defaultModel).build() : r;
  }

  EmbedRequest withModel(EmbedRequest r) {
    return r.getModel().isEmpty() && defaultEmbeddingModel != null
        ? r.toBuilder().setModel(defaultEmbeddingModel).build()
        : r;
  }

  /**
   * @return the channel calls go through (with the client's interceptors), for calling other
   *     services on the same connection; not closed by the caller
   */
  public Channel channel() {
    return calls.channel();
  }

  // ---------------------------------------------------------------- inference

  /**
   * Generates completions for a prompt and waits for them.
   *
   * @param request the request; {@code model} and a prompt are required
   * @return the completions and token counts
   * @throws io.xinserve.client.errors.InvalidArgumentException a parameter is invalid (fields
   *     named)
   * @throws io.xinserve.client.errors.NotFoundException the model is unknown
   * @throws io.xinserve.client.errors.DeadlineExceededException the unary deadline passed
   * @throws XinserveException any other failure
   */
  public GenerateResponse generate(GenerateRequest request) {
    request = withModel(request);
    return calls.blocking(InferenceServiceGrpc.getGenerateMethod(), request, request.getRequestId());
  }

  /**
   * Asynchronous {@link #generate}. Cancelling the returned future cancels the call.
   *
   * @param request the request
   * @return a future completed with the response, or exceptionally with a {@link
   *     XinserveException}
   */
  public CompletableFuture<GenerateResponse> generateAsync(GenerateRequest request) {
    request = withModel(request);
    return calls.async(InferenceServiceGrpc.getGenerateMethod(), request, request.getRequestId());
  }

  /**
   * {@link #generateAsync(GenerateRequest)} with its own deadline. Unlike {@link
   * CompletableFuture#orTimeout}, which only completes the future and leaves the call (and the
   * server's engine request) running, the deadline ends the call itself: the future then fails with
   * {@link io.xinserve.client.errors.DeadlineExceededException}.
   *
   * @param request the request
   * @param deadline the deadline from now; {@link Duration#ZERO} for none
   * @return a future completed with the response, or exceptionally with a {@link
   *     XinserveException}
   */
  public CompletableFuture<GenerateResponse> generateAsync(GenerateRequest request, Duration deadline) {
    return withDeadline(deadline).generateAsync(request);
  }

  /**
   * Streams a generation as deltas. Use in try-with-resources: closing the stream cancels the call.
   *
   * @param request the request
   * @return the open stream
   */
  public ResponseStream<GenerateStreamResponse> generateStream(GenerateRequest request) {
    request = withModel(request);
    return calls.openStream(
        InferenceServiceGrpc.getGenerateStreamMethod(), request, request.getRequestId());
  }

  /**
   * Streams a generation to a listener.
   *
   * @param request the request
   * @param listener receives the deltas, then completion or the error
   * @return a handle whose {@code cancel()} cancels the call
   */
  public CallHandle generateStream(
      GenerateRequest request, StreamListener<GenerateStreamResponse> listener) {
    request = withModel(request);
    return calls.observe(
        InferenceServiceGrpc.getGenerateStreamMethod(), request, request.getRequestId(), listener);
  }

  /**
   * Applies the model's chat template to the messages and generates a reply.
   *
   * @param request the request; {@code model} and at least one message are required
   * @return the reply
   * @throws XinserveException on failure, as for {@link #generate}
   */
  public ChatResponse chat(ChatRequest request) {
    request = withModel(request);
    return calls.blocking(InferenceServiceGrpc.getChatMethod(), request, request.getRequestId());
  }

  /**
   * Asynchronous {@link #chat}. Cancelling the returned future cancels the call.
   *
   * @param request the request
   * @return a future of the reply
   */
  public CompletableFuture<ChatResponse> chatAsync(ChatRequest request) {
    request = withModel(request);
    return calls.async(InferenceServiceGrpc.getChatMethod(), request, request.getRequestId());
  }

  /**
   * {@link #chatAsync(ChatRequest)} with its own deadline, which (unlike {@link
   * CompletableFuture#orTimeout}) ends the call itself.
   *
   * @param request the request
   * @param deadline the deadline from now; {@link Duration#ZERO} for none
   * @return a future of the reply
   */
  public CompletableFuture<ChatResponse> chatAsync(ChatRequest request, Duration deadline) {
    return withDeadline(deadline).chatAsync(request);
  }

  /**
   * Streams a chat reply as deltas; closing the stream cancels the call.
   *
   * @param request the request
   * @return the open stream
   */
  public ResponseStream<ChatStreamResponse> chatStream(ChatRequest request) {
    request = withModel(request);
    return calls.openStream(InferenceServiceGrpc.getChatStreamMethod(), request, request.getRequestId());
  }

  /**
   * Streams a chat reply to a listener.
   *
   * @param request the request
   * @param listener receives the deltas, then completion or the error
   * @return a handle whose {@code cancel()} cancels the call
   */
  public CallHandle chatStream(ChatRequest request, StreamListener<ChatStreamResponse> listener) {
    request = withModel(request);
    return calls.observe(
        InferenceServiceGrpc.getChatStreamMethod(), request, request.getRequestId(), listener);
  }

  /**
   * Embeds texts with an embedding model.
   *
   * @param request the request; {@code model} and 1..1024 non-empty inputs are required
   * @return one vector per input, in input order
   * @throws XinserveException on failure
   */
  public EmbedResponse embed(EmbedRequest request) {
    request = withModel(request);
    return calls.blocking(InferenceServiceGrpc.getEmbedMethod(), request, request.getRequestId());
  }

  /**
   * Embeds texts with the model's default normalisation.
   *
   * @param model the embedding model's served name
   * @param inputs the texts
   * @return the vectors, one per input; an empty list for no inputs (no call is made)
   */
  public List<float[]> embed(String model, List<String> inputs) {
    if (inputs.isEmpty()) {
      return new ArrayList<>();
    }
    EmbedResponse r = embed(EmbedRequest.newBuilder().setModel(model).addAllInputs(inputs).build());
    List<float[]> out = new ArrayList<>(r.getEmbeddingsCount());
    r.getEmbeddingsList().stream()
        .sorted((a, b) -> Integer.compare(a.getIndex(), b.getIndex()))
        .forEach(
            e -> {
              float[] v = new float[e.getValuesCount()];
              for (int i = 0; i < v.length; i++) {
                v[i] = e.getValues(i);
              }
              out.add(v);
            });
    return out;
  }

  /**
   * Asynchronous {@link #embed(EmbedRequest)}.
   *
   * @param request the request
   * @return a future of the response
   */
  public CompletableFuture<EmbedResponse> embedAsync(EmbedRequest request) {
    request = withModel(request);
    return calls.async(InferenceServiceGrpc.getEmbedMethod(), request, request.getRequestId());
  }

  /**
   * Tokenizes text with the model's tokenizer.
   *
   * @param request the request
   * @return the token ids and the model's context length (tokens)
   */
  public TokenizeResponse tokenize(TokenizeRequest request) {
    return calls.blocking(InferenceServiceGrpc.getTokenizeMethod(), request, "");
  }

  /**
   * Tokenizes text, adding the tokenizer's special tokens.
   *
   * @param model the served model name
   * @param text the text
   * @return the token ids
   */
  public List<Integer> tokenize(String model, String text) {
    return tokenize(TokenizeRequest.newBuilder().setModel(model).setText(text).build())
        .getTokenIdsList();
  }

  /**
   * Asynchronous {@link #tokenize(TokenizeRequest)}.
   *
   * @param request the request
   * @return a future of the response
   */
  public CompletableFuture<TokenizeResponse> tokenizeAsync(TokenizeRequest request) {
    return calls.async(InferenceServiceGrpc.getTokenizeMethod(), request, "");
  }

  /**
   * Turns token ids back into text.
   *
   * @param request the request
   * @return the text
   */
  public DetokenizeResponse detokenize(DetokenizeRequest request) {
    return calls.blocking(InferenceServiceGrpc.getDetokenizeMethod(), request, "");
  }

  /**
   * Aborts a running request by its id (see {@link ResponseStream#requestId()}).
   *
   * @param requestId the request id
   * @return {@code true} if a running request was found and aborted, {@code false} if it was
   *     unknown or already finished
   */
  public boolean abort(String requestId) {
    return calls.blocking(
            InferenceServiceGrpc.getAbortMethod(),
            AbortRequest.newBuilder().setRequestId(requestId).build(),
            "")
        .getAborted();
  }

  // ---------------------------------------------------------------- models and server

  /** @return every model the caller's roles grant, served or not */
  public List<Model> listModels() {
    return calls.blocking(ModelServiceGrpc.getListModelsMethod(), ListModelsRequest.getDefaultInstance(), "")
        .getModelsList();
  }

  /** @return a future of {@link #listModels()} */
  public CompletableFuture<List<Model>> listModelsAsync() {
    return calls.async(ModelServiceGrpc.getListModelsMethod(), ListModelsRequest.getDefaultInstance(), "")
        .thenApply(r -> r.getModelsList());
  }

  /**
   * @param name the served model name
   * @return the model
   * @throws io.xinserve.client.errors.NotFoundException if the server does not know it
   */
  public Model getModel(String name) {
    return calls.blocking(
            ModelServiceGrpc.getGetModelMethod(), GetModelRequest.newBuilder().setName(name).build(), "")
        .getModel();
  }

  /** @return versions, schema revision, backend, devices and capabilities of the server */
  public GetServerInfoResponse serverInfo() {
    return calls.blocking(
        ServerServiceGrpc.getGetServerInfoMethod(), GetServerInfoRequest.getDefaultInstance(), "");
  }

  /**
   * Checks that the server still supports the {@code xinserve.v1} contract revision this client
   * implements ({@link #SCHEMA_REVISION}), as the Python client's {@code check_compatibility()}.
   * Nothing calls it implicitly: call it once at start-up.
   *
   * @return the server's {@code GetServerInfoResponse}
   * @throws IncompatibleServerException the server's {@code min_client_revision} is above {@link
   *     #SCHEMA_REVISION}: upgrade the client
   * @throws XinserveException the {@code GetServerInfo} call failed, as for {@link #serverInfo()}
   */
  public GetServerInfoResponse checkCompatibility() {
    GetServerInfoResponse info = serverInfo();
    if (Integer.compareUnsigned(info.getMinClientRevision(), SCHEMA_REVISION) > 0) {
      throw new IncompatibleServerException(
          new ErrorDetails(
              Status.Code.FAILED_PRECONDITION,
              "the server needs xinserve.v1 schema revision >= "
                  + Integer.toUnsignedString(info.getMinClientRevision())
                  + ", this client implements "
                  + SCHEMA_REVISION
                  + ": upgrade xinserve-client",
              null,
              null,
              null,
              null,
              null));
    }
    return info;
  }

  /** @return a future of {@link #serverInfo()} */
  public CompletableFuture<GetServerInfoResponse> serverInfoAsync() {
    return calls.async(
        ServerServiceGrpc.getGetServerInfoMethod(), GetServerInfoRequest.getDefaultInstance(), "");
  }

  /** @return the current load of all models (running and waiting requests, KV-cache use) */
  public GetLoadResponse load() {
    return load("");
  }

  /**
   * @param model a served model name, or empty for all models
   * @return the current load
   */
  public GetLoadResponse load(String model) {
    return calls.blocking(
        ServerServiceGrpc.getGetLoadMethod(), GetLoadRequest.newBuilder().setModel(model).build(), "");
  }

  /**
   * Calls the standard {@code grpc.health.v1.Health/Check}.
   *
   * @param service {@code ""} for the whole server, or e.g. {@code "xinserve.v1.InferenceService"}
   * @param timeout deadline of this check
   * @return the serving status
   * @throws XinserveException if the check itself fails (e.g. UNAVAILABLE, DEADLINE_EXCEEDED)
   */
  public HealthCheckResponse.ServingStatus checkHealth(String service, Duration timeout) {
    try {
      return ClientCalls.blockingUnaryCall(
              calls.channel(),
              HealthGrpc.getCheckMethod(),
              calls.options(timeout, ""),
              HealthCheckRequest.newBuilder().setService(service).build())
          .getStatus();
    } catch (StatusRuntimeException e) {
      throw XinserveExceptions.from(e);
    }
  }

  /**
   * Returns a Reactor view of this client. Requires {@code io.projectreactor:reactor-core} on the
   * class path (an optional dependency of this artifact).
   *
   * @return the reactive client, sharing this client's channel
   */
  public ReactorXinserveClient reactor() {
    return new ReactorXinserveClient(this);
  }

  /**
   * Shuts the channel down, waiting up to 5 s for running calls, then cancels what is left. A view
   * made by {@link #withDeadline} or a client built on a caller's channel does nothing here.
   */
  @Override
  public void close() {
    ChannelFactory.shutdown(ownedChannel);
  }

  // ---------------------------------------------------------------- plumbing

  Calls calls() {
    return calls;
  }

  static Map<String, Object> serviceConfig(String loadBalancingPolicy, RetryPolicy retry) {
    return ServiceConfig.of(loadBalancingPolicy, retry, null);
  }

  /**
   * Builds a {@link XinserveClient}. Defaults: TLS with the JVM's trusted CAs, {@code round_robin}
   * load balancing, unary deadline 30 s, no stream deadline, keepalive ping every 60 s with a 20 s
   * timeout (only while calls are open), 32 MiB maximum inbound message, {@link
   * RetryPolicy#defaults()}.
   */
  public static final class Builder {
    private final ChannelFactory channels = new ChannelFactory();
    private Supplier<String> tokens;
    private Duration unaryDeadline = Duration.ofSeconds(30);
    private Duration streamDeadline = Duration.ZERO;
    private int streamPrefetch = 16;
    private Duration streamIdleTimeout = Duration.ZERO;
    private String defaultModel;
    private String defaultEmbeddingModel;

    private Builder() {}

    /**
     * Cancels a {@link ResponseStream} that receives no message for this long (the server may be
     * stuck, or the reader forgot the stream); its reader then gets a {@link
     * io.xinserve.client.errors.DeadlineExceededException}. Unlike the stream deadline it does not
     * limit long generations that keep producing tokens.
     *
     * @param timeout the idle limit; {@link Duration#ZERO} (default) for none
     * @return this builder
     */
    public Builder streamIdleTimeout(Duration timeout) {
      Objects.requireNonNull(timeout, "timeout");
      if (timeout.isNegative()) {
        throw new IllegalArgumentException("streamIdleTimeout must be >= 0");
      }
      this.streamIdleTimeout = timeout;
      return this;
    }

    /**
     * The generative model used by the text shortcuts ({@link XinserveClient#generateText}, {@link
     * XinserveClient#streamText}, {@link XinserveClient#chat(String, String)}) and by every
     * generate/chat request whose {@code model} is empty.
     *
     * @param model a served model name, or {@code null} for none
     * @return this builder
     */
    public Builder defaultModel(String model) {
      this.defaultModel = model == null || model.isBlank() ? null : model;
      return this;
    }

    /**
     * The embedding model used by {@link XinserveClient#embed(List)} and by embed requests whose
     * {@code model} is empty.
     *
     * @param model a served embedding model name, or {@code null} for none
     * @return this builder
     */
    public Builder defaultEmbeddingModel(String model) {
      this.defaultEmbeddingModel = model == null || model.isBlank() ? null : model;
      return this;
    }

    /**
     * The server to call, as a gRPC target URI: {@code dns:///host:port} (all addresses of the
     * name, balanced by the load-balancing policy), {@code static://}..., or plain {@code
     * host:port}.
     *
     * @param target the target
     * @return this builder
     */
    public Builder target(String target) {
      channels.target = Objects.requireNonNull(target, "target");
      return this;
    }

    /**
     * Shorthand for {@code target("dns:///" + host + ":" + port)}.
     *
     * @param host host name or IP literal
     * @param port TCP port
     * @return this builder
     */
    public Builder address(String host, int port) {
      String h = host.contains(":") && !host.startsWith("[") ? "[" + host + "]" : host;
      return target("dns:///" + h + ":" + port);
    }

    /**
     * Talks plaintext HTTP/2 (no TLS). Only for loopback or a trusted sidecar: bearer tokens would
     * travel in clear.
     *
     * @return this builder
     */
    public Builder plaintext() {
      channels.plaintext = true;
      return this;
    }

    /**
     * Trusts the CA certificate(s) in a PEM file instead of the JVM's default trust store.
     *
     * @param caPem PEM file with one or more CA certificates
     * @return this builder
     */
    public Builder trustCertificates(Path caPem) {
      channels.trustPem = ChannelFactory.read(caPem);
      channels.plaintext = false;
      return this;
    }

    /**
     * Trusts the CA certificate(s) in PEM text.
     *
     * @param caPem PEM bytes
     * @return this builder
     */
    public Builder trustCertificates(byte[] caPem) {
      channels.trustPem = caPem.clone();
      channels.plaintext = false;
      return this;
    }

    /**
     * Verifies the server with this trust manager (e.g. from a Spring SSL bundle).
     *
     * @param trustManager the trust manager
     * @return this builder
     */
    public Builder trustManager(TrustManager trustManager) {
      channels.trustManager = trustManager;
      channels.plaintext = false;
      return this;
    }

    /**
     * Presents a client certificate (mutual TLS) from PEM files.
     *
     * @param certChainPem the client certificate chain (PEM)
     * @param privateKeyPem its private key (unencrypted PKCS#8 PEM)
     * @return this builder
     */
    public Builder clientCertificate(Path certChainPem, Path privateKeyPem) {
      channels.certChainPem = ChannelFactory.read(certChainPem);
      channels.privateKeyPem = ChannelFactory.read(privateKeyPem);
      channels.plaintext = false;
      return this;
    }

    /**
     * Presents a client certificate (mutual TLS) from this key manager.
     *
     * @param keyManager the key manager
     * @return this builder
     */
    public Builder keyManager(KeyManager keyManager) {
      channels.keyManager = keyManager;
      channels.plaintext = false;
      return this;
    }

    /**
     * Overrides the authority (TLS server name and {@code :authority}) of the channel.
     *
     * @param authority e.g. {@code "xinserve.internal"}
     * @return this builder
     */
    public Builder overrideAuthority(String authority) {
      channels.authority = authority;
      return this;
    }

    /**
     * Sends {@code authorization: Bearer <token>} with a fixed token.
     *
     * @param token the token
     * @return this builder
     */
    public Builder bearerToken(String token) {
      Objects.requireNonNull(token, "token");
      return bearerToken(() -> token);
    }

    /**
     * Sends {@code authorization: Bearer <token>}, asking the supplier for every call (so a
     * refreshed token is picked up at once). The supplier runs on the channel's executor and may
     * block briefly; if it throws, the call fails with UNAUTHENTICATED. See {@link BearerTokens}.
     *
     * @param tokens the token supplier; {@code null} or blank tokens send no header
     * @return this builder
     */
    public Builder bearerToken(Supplier<String> tokens) {
      this.tokens = tokens;
      return this;
    }

    /**
     * Extra headers for every call, asked for at the start of each call (e.g. the W3C {@code
     * traceparent} of the current span). Names are lower-cased; failures of the supplier are
     * ignored; a header an interceptor already set is not replaced.
     *
     * @param headers the supplier
     * @return this builder
     */
    public Builder headers(Supplier<Map<String, String>> headers) {
      channels.headers = headers;
      return this;
    }

    /**
     * Default deadline of unary calls, measured from the start of each call.
     *
     * @param deadline the deadline; {@link Duration#ZERO} for none
     * @return this builder
     */
    public Builder unaryDeadline(Duration deadline) {
      this.unaryDeadline = Objects.requireNonNull(deadline);
      return this;
    }

    /**
     * Default deadline of streaming calls (whole stream). Default none, so long generations are
     * not cut off; bound them with {@code max_tokens} or set one here.
     *
     * @param deadline the deadline; {@link Duration#ZERO} for none
     * @return this builder
     */
    public Builder streamDeadline(Duration deadline) {
      this.streamDeadline = Objects.requireNonNull(deadline);
      return this;
    }

    /**
     * HTTP/2 keepalive. The server accepts pings from clients every 10 s or more rarely, also
     * without open calls; pinging more often gets the connection closed (GOAWAY
     * too_many_pings).
     *
     * @param time interval between pings; {@link Duration#ZERO} disables keepalive
     * @param timeout how long to wait for the ping's answer before closing the connection
     * @param withoutCalls whether to ping also while no call is open
     * @return this builder
     */
    public Builder keepAlive(Duration time, Duration timeout, boolean withoutCalls) {
      channels.keepAliveTime = Objects.requireNonNull(time);
      channels.keepAliveTimeout = Objects.requireNonNull(timeout);
      channels.keepAliveWithoutCalls = withoutCalls;
      return this;
    }

    /**
     * Largest response message accepted, in bytes (default 32 MiB: 1024 embeddings of 4096 floats
     * fit with room).
     *
     * @param bytes the limit
     * @return this builder
     */
    public Builder maxInboundMessageSize(int bytes) {
      if (bytes <= 0) {
        throw new IllegalArgumentException("maxInboundMessageSize must be > 0");
      }
      channels.maxInboundMessageSize = bytes;
      return this;
    }

    /**
     * Retry policy for UNAVAILABLE; {@link RetryPolicy#none()} disables retries.
     *
     * @param policy the policy
     * @return this builder
     */
    public Builder retryPolicy(RetryPolicy policy) {
      channels.retryPolicy = Objects.requireNonNull(policy);
      return this;
    }

    /**
     * gRPC load-balancing policy (default {@code round_robin}; {@code pick_first} for one
     * connection).
     *
     * @param policy the policy name
     * @return this builder
     */
    public Builder loadBalancingPolicy(String policy) {
      channels.loadBalancingPolicy = policy;
      return this;
    }

    /**
     * Adds client interceptors (metrics, logging). The first one added sees the call first.
     *
     * @param interceptors the interceptors
     * @return this builder
     */
    public Builder intercept(ClientInterceptor... interceptors) {
      channels.interceptors.addAll(List.of(interceptors));
      return this;
    }

    /**
     * Number of messages a {@link ResponseStream} requests ahead of its reader (flow control).
     *
     * @param messages 1..1024, default 16
     * @return this builder
     */
    public Builder streamPrefetch(int messages) {
      if (messages < 1 || messages > 1024) {
        throw new IllegalArgumentException("streamPrefetch must be 1..1024");
      }
      this.streamPrefetch = messages;
      return this;
    }

    /**
     * User-agent prefix sent to the server.
     *
     * @param userAgent the user agent
     * @return this builder
     */
    public Builder userAgent(String userAgent) {
      channels.userAgent = userAgent;
      return this;
    }

    /**
     * Uses this channel builder instead of one made from {@link #target} (e.g. an in-process
     * channel in tests, or a transport-specific builder). TLS settings of this builder are then
     * ignored; everything else is applied to it.
     *
     * @param builder the channel builder
     * @return this builder
     */
    public Builder channelBuilder(ManagedChannelBuilder<?> builder) {
      channels.channelBuilder = builder;
      return this;
    }

    /**
     * Uses an existing channel, which the client will not shut down. Channel-level settings (TLS,
     * keepalive, retry, message size) of this builder are ignored.
     *
     * @param channel the channel
     * @return this builder
     */
    public Builder channel(ManagedChannel channel) {
      channels.channel = channel;
      return this;
    }

    /**
     * Last word on the channel builder, called after the client applied its settings.
     *
     * @param customizer the customizer
     * @return this builder
     */
    public Builder customizeChannel(Consumer<ManagedChannelBuilder<?>> customizer) {
      channels.customizer = customizer;
      return this;
    }

    /**
     * Builds the client. The channel connects lazily, on the first call.
     *
     * @return the client
     * @throws IllegalStateException if no target or channel was given
     * @throws UncheckedIOException if PEM material cannot be parsed
     */
    public XinserveClient build() {
      ProtobufRuntimeCheck.verify();
      GrpcRuntimeCheck.warnIfOlder();
      ChannelFactory.Opened opened = channels.open();
      Calls calls =
          new Calls(
              opened.intercepted(),
              unaryDeadline,
              streamDeadline,
              streamPrefetch,
              tokens == null ? null : new ClientHeaders.Bearer(tokens),
              streamIdleTimeout);
      return new XinserveClient(
          opened.owned(),
          calls,
          defaultModel,
          defaultEmbeddingModel,
          channels.target != null ? channels.target : "channel",
          opened.state());
    }
  }
}
