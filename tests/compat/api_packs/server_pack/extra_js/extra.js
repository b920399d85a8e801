export const serverPackExtra = true;
