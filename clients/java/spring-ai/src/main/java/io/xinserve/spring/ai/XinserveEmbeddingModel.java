package io.xinserve.spring.ai;

import io.xinserve.client.XinserveClient;
import io.xinserve.v1.EmbedRequest;
import io.xinserve.v1.EmbedResponse;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;
import org.springframework.ai.document.Document;
import org.springframework.ai.embedding.AbstractEmbeddingModel;
import org.springframework.ai.embedding.Embedding;
import org.springframework.ai.embedding.EmbeddingOptions;
import org.springframework.ai.embedding.EmbeddingRequest;
import org.springframework.ai.embedding.EmbeddingResponse;
import org.springframework.ai.embedding.EmbeddingResponseMetadata;

/**
 * A Spring AI {@link org.springframework.ai.embedding.EmbeddingModel} served by xinserve, over the
 * SDK's {@code Embed} call: one vector per input text, in input order, with the model's default
 * normalisation. The model is the request options' model, else this model's default, else the
 * client's default embedding model. Errors as for {@link XinserveChatModel}.
 */
public class XinserveEmbeddingModel extends AbstractEmbeddingModel {
  private final XinserveClient client;
  private final String defaultModel;

  /**
   * @param client the xinserve client to call through
   * @param defaultModel the embedding model's served name, or {@code null} for the client's
   *     default embedding model
   */
  public XinserveEmbeddingModel(XinserveClient client, String defaultModel) {
    this.client = Objects.requireNonNull(client, "client");
    this.defaultModel = defaultModel == null || defaultModel.isBlank() ? null : defaultModel;
  }

  /**
   * Embeds the request's texts (1..1024, each non-empty).
   *
   * @param request the texts and options
   * @return one embedding per text, indexed in input order
   */
  @Override
  public EmbeddingResponse call(EmbeddingRequest request) {
    String model = model(request.getOptions());
    EmbedResponse r;
    try {
      r = client.embed(EmbedRequest.newBuilder().setModel(model).addAllInputs(request.getInstructions()).build());
    } catch (RuntimeException e) {
      throw XinserveAiErrors.map(e);
    }
    List<Embedding> out = new ArrayList<>(r.getEmbeddingsCount());
    r.getEmbeddingsList().stream()
        .sorted(Comparator.comparingInt(io.xinserve.v1.Embedding::getIndex))
        .forEach(
            e -> {
              float[] v = new float[e.getValuesCount()];
              for (int i = 0; i < v.length; i++) {
                v[i] = e.getValues(i);
              }
              out.add(new Embedding(v, e.getIndex()));
            });
    EmbeddingResponseMetadata md =
        new EmbeddingResponseMetadata(
            model,
            new org.springframework.ai.chat.metadata.DefaultUsage(r.getUsage().getPromptTokens(), 0),
            java.util.Map.of("request_id", r.getRequestId()));
    return new EmbeddingResponse(out, md);
  }

  /**
   * @param document the document; its text is embedded
   * @return its vector
   */
  @Override
  public float[] embed(Document document) {
    return embed(document.getText());
  }

  private String model(EmbeddingOptions options) {
    String m = options == null ? null : options.getModel();
    if (m == null || m.isBlank()) {
      m = defaultModel;
    }
    if (m == null) {
      m = client.defaultEmbeddingModel().orElse(null);
    }
    if (m == null) {
      throw new IllegalArgumentException(
          "no embedding model: set xinserve.ai.embedding.model or xinserve.client.embedding-model");
    }
    return m;
  }
}
