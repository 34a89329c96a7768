package io.xinserve.spring.ai;

import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * {@code xinserve.ai.*}: which xinserve client the Spring AI models call through, their models and
 * default chat options.
 */
@ConfigurationProperties(prefix = "xinserve.ai")
public class XinserveAiProperties {
  /**
   * Name of the xinserve client to call through: "default" (xinserve.client.*) or a key of
   * xinserve.client.clients.
   */
  private String client = "default";

  /** The ChatModel. */
  private final Chat chat = new Chat();

  /** The EmbeddingModel. */
  private final EmbeddingSettings embedding = new EmbeddingSettings();

  /** @return the client's name */
  public String getClient() {
    return client;
  }

  /** @param client the client's name */
  public void setClient(String client) {
    this.client = client;
  }

  /** @return the chat settings */
  public Chat getChat() {
    return chat;
  }

  /** @return the embedding settings */
  public EmbeddingSettings getEmbedding() {
    return embedding;
  }

  /** Settings of the ChatModel. */
  public static class Chat {
    /** Whether to auto-configure the xinserve ChatModel. */
    private boolean enabled = true;

    /**
     * Default options; options.model is the served model name (default: the client's
     * xinserve.client.model).
     */
    private final XinserveChatOptions options = new XinserveChatOptions();

    /** @return whether enabled */
    public boolean isEnabled() {
      return enabled;
    }

    /** @param enabled whether enabled */
    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }

    /** @return the default options */
    public XinserveChatOptions getOptions() {
      return options;
    }
  }

  /** Settings of the EmbeddingModel. */
  public static class EmbeddingSettings {
    /** Whether to auto-configure the xinserve EmbeddingModel. */
    private boolean enabled = true;

    /** Served embedding model name (default: the client's xinserve.client.embedding-model). */
    private String model;

    /** @return whether enabled */
    public boolean isEnabled() {
      return enabled;
    }

    /** @param enabled whether enabled */
    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }

    /** @return the model */
    public String getModel() {
      return model;
    }

    /** @param model the model */
    public void setModel(String model) {
      this.model = model;
    }
  }
}
